"""Spark on Croupier against Spark's own ``sort`` shuffle, side by side in one run.

    python -m integration.spark.bench [--runs 3] [--scale 4] [--json]

Starts a Croupier cluster (a master and 3 workers as processes) and two Spark drivers on
``local-cluster[2,1,1024]`` (``sort`` and Croupier), runs each query once to warm up, then
``--runs`` times alternating which manager goes first, and prints the median wall time per
query and manager, their ratio, and the executor CPU of each. It then measures keyed BLAKE3
(commons-codec, what the JVM client digests batches with) on 256 KiB inputs and prices the
digests of the bytes Croupier pushed and fetched in executor CPU seconds. No assertion on speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from croupier.core.config import MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from integration.spark.harness import Driver, spark_conf

QUERIES = {
    "rdd_reduce_by_key": 50_000,
    "df_group_by": 500_000,
    "df_sort_merge_join": 500_000,
    "df_order_by": 100_000,
}

B3_MAIN = """
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import org.apache.commons.codec.digest.Blake3;
public class B3Rate {
  static long run(byte[] key, byte[] data, byte[] out, long nanos) {
    long bytes = 0, t0 = System.nanoTime();
    while (System.nanoTime() - t0 < nanos) {
      Blake3.initKeyedHash(key).update(data).doFinalize(out);
      bytes += data.length;
    }
    return bytes;
  }
  public static void main(String[] a) {
    byte[] key = new byte[32], data = new byte[256 << 10], out = new byte[16];
    for (int i = 0; i < data.length; i++) data[i] = (byte) (i * 31);
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    run(key, data, out, 2_000_000_000L); // warm up: the JIT compiles the hot loop
    long cpu0 = mx.getCurrentThreadCpuTime();
    long bytes = run(key, data, out, 3_000_000_000L);
    System.out.println(bytes / ((mx.getCurrentThreadCpuTime() - cpu0) / 1e9));
  }
}
"""


def blake3_rate(jars: Path) -> float:
    """Bytes per CPU second of keyed BLAKE3 in this JVM (commons-codec, 256 KiB inputs)."""
    with tempfile.TemporaryDirectory(prefix="croupier-b3-") as tmp:
        src = Path(tmp) / "B3Rate.java"
        src.write_text(B3_MAIN)
        cp = f"{jars}/*"
        subprocess.run(["javac", "-d", tmp, "-cp", cp, str(src)], check=True, capture_output=True)
        out = subprocess.run(
            ["java", "-cp", f"{tmp}:{cp}", "B3Rate"], check=True, capture_output=True, text=True
        )
    return float(out.stdout.strip())


def run(runs: int, scale: int, base: Path) -> dict[str, Any]:
    from croupier.spark import settings, spark_jars_dir

    rows: dict[str, dict[str, list[dict[str, Any]]]] = {q: {"sort": [], "croupier": []} for q in QUERIES}
    retried: list[str] = []
    with LocalCluster(
        3,
        base / "cluster",
        processes=True,
        master_config=MasterConfig(worker_timeout=10.0),
        worker_config=WorkerConfig(heartbeat_interval=1.0),
    ) as cluster:
        no_spec = {"spark.speculation": "false"}
        drivers = {
            "sort": Driver(spark_conf(**no_spec, **{"spark.shuffle.manager": "sort"}), base / "sort.log"),
            "croupier": Driver(spark_conf(**no_spec, **settings(cluster.master_url)), base / "croupier.log"),
        }
        try:
            for d in drivers.values():
                d.wait_ready()
            for i in range(runs + 1):
                order = ["sort", "croupier"] if i % 2 == 0 else ["croupier", "sort"]
                for query, n in QUERIES.items():
                    for label in order:
                        print(f"run {i} {query} {label}", file=sys.stderr, flush=True)
                        out = _timed(drivers[label], query, n * scale, retried)
                        if i > 0:  # run 0 warms up
                            rows[query][label].append(out)
                    results = {label: rows[query][label][-1]["result"] for label in order} if i > 0 else {}
                    if results and results["sort"] != results["croupier"]:
                        raise AssertionError(f"{query}: results differ: {results}")
        finally:
            for d in drivers.values():
                d.stop()
    report = summarize(rows, blake3_rate(spark_jars_dir()))
    report["retried"] = retried
    return report


def _timed(driver: Driver, query: str, n: int, retried: list[str]) -> dict[str, Any]:
    """One timed run of ``query``; a run that fails is run once more and named in ``retried``
    (the shared machine's other processes once reset the driver's local result socket)."""
    try:
        return dict(driver.run("timed", query=query, n=n))
    except AssertionError as exc:
        first = str(exc).splitlines()
        retried.append(f"{query}: {first[-1] if first else exc}")
        print(f"retrying {query}: {exc}", file=sys.stderr, flush=True)
        return dict(driver.run("timed", query=query, n=n))


def summarize(rows: dict[str, dict[str, list[dict[str, Any]]]], rate: float) -> dict[str, Any]:
    table = []
    for query, by in rows.items():
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in by.items()}
        cpu = {k: statistics.median(r["executor_cpu_s"] for r in v) for k, v in by.items()}
        ours = by["croupier"][-1]
        digested = ours["shuffle_write_bytes"] + ours["shuffle_read_bytes"]
        table.append(
            {
                "query": query,
                "sort_s": round(med["sort"], 2),
                "croupier_s": round(med["croupier"], 2),
                "ratio": round(med["croupier"] / med["sort"], 2),
                "sort_cpu_s": round(cpu["sort"], 2),
                "croupier_cpu_s": round(cpu["croupier"], 2),
                "shuffle_bytes": ours["shuffle_write_bytes"],
                "digest_cpu_s": round(digested / rate, 3),
                "digest_share": round(digested / rate / cpu["croupier"], 4) if cpu["croupier"] else None,
            }
        )
    return {"blake3_bytes_per_cpu_s": round(rate), "queries": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="croupier-spark-bench-") as tmp:
        report = run(args.runs, args.scale, Path(tmp))
    if args.json:
        print(json.dumps(report))
        return
    print(f"keyed BLAKE3 (commons-codec): {report['blake3_bytes_per_cpu_s'] / 1e9:.2f} GB per CPU second")
    print(f"runs retried after a failure: {report['retried'] or 'none'}")
    cols = list(report["queries"][0])
    print(" | ".join(cols))
    for row in report["queries"]:
        print(" | ".join(str(row[c]) for c in cols))


if __name__ == "__main__":
    main()
