"""The JVM client's MAPPER_ENDs at the master: batched (``MAPPER_END_BATCH``) against one per
request, alternating in one run (issue 27).

    .venv/bin/python -m integration.jvm_ends_bench [--maps 4000] [--threads 8] [--rounds 2]

A local cluster (a master and two workers, processes); for each round and mode a shuffle of
``--maps`` maps and 4 partitions, unreplicated, and one JVM (``JvmCli ends``) of
``--threads`` threads that commit empty writers of its maps in turn: an executor of that many
cores running short map tasks, so the run is its MAPPER_ENDs. Prints, per run, the ends, the
requests they took, MAPPER_END/s and the master's CPU per 1,000 ends (user + system, from
just before the JVM starts to a second after it ends: the shuffle's commit included).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import croupier
from croupier.services.local import LocalCluster
from tests.jvm.harness import build_test_classpath, spark_jars_or_skip

__all__ = ["ends_bench"]

_JAVA = ("java", "-Xss4m", "-XX:+UseSerialGC", "-cp")
_CLI = "io.croupier.test.JvmCli"


def _master_pid() -> int:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"cli\0master" in cmd and parent == os.getpid():
            return int(name)
    raise RuntimeError("the local cluster's master process was not found")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ends_bench(maps: int, threads: int, rounds: int) -> list[dict[str, Any]]:
    """One row per run: mode, ends, won, requests, seconds, rate, master CPU ms per 1,000."""
    cp = build_test_classpath(spark_jars_or_skip())
    rows: list[dict[str, Any]] = []
    with LocalCluster(2, processes=True) as cl, croupier.connect(cl.master_url) as client:
        app = client.register_app("jvm-ends-bench")
        master = _master_pid()
        for _ in range(rounds):
            for mode in ("batched", "single"):
                sh = app.register_shuffle(num_mappers=maps, num_partitions=4, replicate=False)
                before = _cpu(master)
                done = subprocess.run(
                    [
                        *_JAVA,
                        cp,
                        "io.croupier.test.JvmCli",
                        "ends",
                        cl.master_url,
                        sh.handle(),
                        str(threads),
                        mode,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=True,
                )
                time.sleep(1.0)  # the shuffle's commit
                used = _cpu(master) - before
                got = dict(kv.split("=") for kv in done.stdout.strip().splitlines()[-1].split())
                seconds = float(got["seconds"])
                rows.append(
                    {
                        "mode": mode,
                        "ends": int(got["ends"]),
                        "won": int(got["won"]),
                        "requests": int(got["requests"]),
                        "seconds": seconds,
                        "mapper_end_per_s": round(int(got["ends"]) / seconds),
                        "master_cpu_ms_per_1000": round(used * 1e6 / maps),
                    }
                )
                print(rows[-1], flush=True)
                sh.unregister()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m integration.jvm_ends_bench")
    parser.add_argument("--maps", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ends_bench(args.maps, args.threads, args.rounds)


if __name__ == "__main__":
    main()
