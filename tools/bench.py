"""``croupier bench``: benchmarks, measured side by side in one run (issue: bench).

Scenarios:

- ``raw``: the SDK shuffle end to end (``croupier demo``'s verified shuffle: first push
  to last verified record), with replication on and off.
- ``ceiling``: ``../shared/bench/ceiling.py`` (a bare push/replicate/flush/fetch
  pipeline with no service logic) on the same bytes; ``raw`` is reported as a ratio of it.
- ``scale``: the same bytes at 64, 256 and 640 partitions.
- ``actors``: 640 partitions with the workers' locations sharded over a few
  ``PartitionActor``s (the default) and with one actor per location (DESIGN §11).
- ``reads``: 640 partitions, reducers using ``Shuffle.readers`` (the default) and
  opening one ``Shuffle.reader`` per partition.
- ``control``: MAPPER_END commands per second at the master, with the embedded file
  log and (with ``--ha``) with a ZooKeeper-replicated log: client processes each
  keep one command in flight, so the rate shows what group commit buys.

Report figures as ratios of runs made in the same invocation: the machine is
shared and noisy.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from croupier.core import commands as c
from croupier.core.config import WorkerConfig

__all__ = ["control_rate", "main_bench"]


def _client(url: str, app_id: str, shuffle_id: int, maps: list[int], window: int) -> float:
    """Pipelined MAPPER_ENDs, ``window`` in flight: many executors, as one process."""
    import threading

    from croupier.core.commands import encode_command
    from croupier.transports.async_rpc import AsyncRpcClient

    credits = threading.Semaphore(window)
    failures: list[BaseException] = []
    client = AsyncRpcClient(timeout=60.0, name="bench")
    client.start()

    def done(reply: object, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)
        credits.release()

    try:
        start = time.perf_counter()
        for m in maps:
            credits.acquire()
            msg_type, body = encode_command(c.MapperEnd(app_id, shuffle_id, m, 0, 1))
            client.send(url, msg_type, body, (), done)
        for _ in range(window):
            credits.acquire()
        elapsed = time.perf_counter() - start
    finally:
        client.stop()
    if failures:
        raise failures[0]
    return elapsed


def control_rate(url: str, *, commands: int = 20_000, clients: int = 4, window: int = 32) -> dict[str, Any]:
    """Send ``commands`` MAPPER_ENDs from ``clients`` processes, ``window`` in flight each."""
    from croupier.transports.master_client import MasterClient

    with MasterClient(url, timeout=30.0, deadline=60.0) as master:
        master.call(c.RegisterWorker("bench-w0", "127.0.0.1", 1, 2, 3, 4, 10**6, "bench"))
        app = str(master.call(c.RegisterApp("bench"))["app_id"])
        reply = master.call(c.RegisterShuffle(app, commands, 1, replicate=False))
        sid = int(str(reply["shuffle_id"]))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(clients, mp_context=ctx) as pool:
        for _ in range(clients):
            pool.submit(_client, url, app, sid, [], 1).result()  # start the processes first
        started = time.perf_counter()
        futures = [
            pool.submit(_client, url, app, sid, list(range(i, commands, clients)), window)
            for i in range(clients)
        ]
        for f in futures:
            f.result()
        seconds = time.perf_counter() - started
    return {
        "commands": commands,
        "clients": clients,
        "seconds": round(seconds, 3),
        "per_s": round(commands / seconds),
    }


def _file_master_rate(commands: int, clients: int, run: int) -> dict[str, Any]:
    from croupier.services.master import MasterService

    with tempfile.TemporaryDirectory() as tmp, MasterService("tcp://127.0.0.1:0", Path(tmp) / "m") as m:
        control_rate(m.url, commands=min(2000, commands), clients=clients)  # warm-up, not counted
        return control_rate(m.url, commands=commands, clients=clients)


class _ZooKeeperRuns:
    """One ZooKeeper for every run (a JVM needs warming up), a fresh root per run."""

    def __init__(self) -> None:
        from croupier.ha.zkserver import LocalZooKeeper

        self._tmp = tempfile.TemporaryDirectory()
        self.zk = LocalZooKeeper(Path(self._tmp.name) / "zk").start()

    def __call__(self, commands: int, clients: int, run: int) -> dict[str, Any]:
        from croupier.services.ha_master import HaMasterService

        with HaMasterService("tcp://127.0.0.1:0", self.zk.url(f"/bench{run}")) as member:
            deadline = time.monotonic() + 30
            while member.role != "leader":
                if time.monotonic() > deadline:
                    raise TimeoutError("the master did not become leader")
                time.sleep(0.05)
            control_rate(member.url, commands=min(2000, commands), clients=clients)  # warm-up
            return control_rate(member.url, commands=commands, clients=clients)

    def close(self) -> None:
        self.zk.stop()
        self._tmp.cleanup()


def _ceiling_path() -> Path | None:
    here = Path(__file__).resolve()
    for candidate in (
        Path.cwd() / ".." / "shared" / "bench" / "ceiling.py",
        here.parents[2] / "shared" / "bench" / "ceiling.py",
    ):
        if candidate.exists():
            return candidate.resolve()
    return None


def _ceiling(size: int) -> float:
    """One run of the shared ceiling pipeline; its end-to-end MB/s."""
    import subprocess
    import sys

    path = _ceiling_path()
    assert path is not None
    out = subprocess.run(
        [sys.executable, str(path), "--transport", "tcp", "--total", str(size), "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    line = [text for text in out.stdout.splitlines() if text.startswith("SUMMARY ")][-1]
    # "SUMMARY <config JSON> <summary JSON>"
    decoder = json.JSONDecoder()
    _, end = decoder.raw_decode(line, len("SUMMARY "))
    summary, _ = decoder.raw_decode(line, end + 1)
    return float(summary["e2e_MBps"]["median"])


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def data_scenarios(
    scenarios: list[str],
    *,
    size: int,
    runs: int,
    mappers: int,
    workers: int,
    partitions: int = 64,
    push_buffer: int = 0,
    plot: str | None = None,
) -> dict[str, Any]:
    """raw, ceiling, scale, actors and reads, interleaved run by run.

    ``partitions`` and ``push_buffer`` (the client's batch size, 0 = its default) apply
    to ``raw``; ``plot`` names a PNG file for the scale curve (needs matplotlib).
    """
    from croupier.tools.demo import run_demo

    results: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    rss: dict[str, int] = {}
    failures: list[str] = []
    if "ceiling" in scenarios and _ceiling_path() is None:
        results["ceiling"] = "skipped: ../shared/bench/ceiling.py is missing"
        scenarios = [s for s in scenarios if s != "ceiling"]
    for _ in range(runs):
        plan: list[tuple[str, Any]] = []
        if "raw" in scenarios or "ceiling" in scenarios:
            plan.append(
                (
                    "raw/replicated",
                    lambda: run_demo(
                        size, mappers, partitions, workers, progress=False, push_buffer=push_buffer
                    ),
                )
            )
        if "raw" in scenarios:
            plan.append(
                (
                    "raw/unreplicated",
                    lambda: run_demo(
                        size,
                        mappers,
                        partitions,
                        workers,
                        progress=False,
                        replicate=False,
                        push_buffer=push_buffer,
                    ),
                )
            )
        if "scale" in scenarios:
            for parts in (64, 256, 640):
                plan.append(
                    (f"scale/{parts}", lambda p=parts: run_demo(size, mappers, p, workers, progress=False))
                )
        if "actors" in scenarios:
            # DESIGN §11: a few actors owning shards of locations, against one actor per location
            for name, shards in (("sharded", WorkerConfig().partition_actors), ("per-location", 0)):
                config = WorkerConfig(heartbeat_interval=1.0, partition_actors=shards)
                plan.append(
                    (
                        f"actors/{name}/640",
                        lambda c=config: run_demo(
                            size, mappers, 640, workers, progress=False, worker_config=c
                        ),
                    )
                )
        if "reads" in scenarios:
            # reducers of many partitions: Shuffle.readers against one Shuffle.reader per partition
            for name, batched in (("readers", True), ("reader-each", False)):
                plan.append(
                    (
                        f"reads/{name}/640",
                        lambda b=batched: run_demo(
                            size, mappers, 640, workers, progress=False, batched_reads=b
                        ),
                    )
                )
        if "ceiling" in scenarios:
            plan.append(("ceiling", lambda: _ceiling(size)))
        for name, fn in plan:
            out = fn()
            if name == "ceiling":
                samples.setdefault(name, []).append(out)
                continue
            if not out.verified:
                failures.append(f"{name}: {out.errors[:3]}")
            samples.setdefault(name, []).append(out.mb_per_s)
            samples.setdefault(name + "/seconds", []).append(out.seconds)
            rss[name] = max(rss.get(name, 0), out.worker_peak_rss)
    for name, values in samples.items():
        if not name.endswith("/seconds"):
            results[name] = {"mb_per_s": _stats(values), "runs": len(values)}
            if name in rss:
                results[name]["worker_peak_rss_mib"] = round(rss[name] / 2**20)
                results[name]["seconds"] = _stats(samples[name + "/seconds"])
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratios: dict[str, float] = {}
    if "raw/replicated" in med and "ceiling" in med:
        ratios["raw_replicated_to_ceiling"] = round(med["raw/replicated"] / med["ceiling"], 3)
    if "raw/replicated/seconds" in med and "raw/unreplicated/seconds" in med:
        ratios["replication_cost"] = round(med["raw/replicated/seconds"] / med["raw/unreplicated/seconds"], 3)
    if "scale/640/seconds" in med and "scale/64/seconds" in med:
        ratios["scale_640_to_64"] = round(med["scale/640/seconds"] / med["scale/64/seconds"], 3)
    if "actors/sharded/640/seconds" in med and "actors/per-location/640/seconds" in med:
        ratios["actors_sharded_to_per_location_640"] = round(
            med["actors/sharded/640/seconds"] / med["actors/per-location/640/seconds"], 3
        )
    if "reads/readers/640/seconds" in med and "reads/reader-each/640/seconds" in med:
        ratios["reads_readers_to_reader_each_640"] = round(
            med["reads/readers/640/seconds"] / med["reads/reader-each/640/seconds"], 3
        )
    results["ratios"] = ratios
    if failures:
        results["failures"] = failures
    if plot is not None:
        results["plot"] = _plot_scale(results, plot, size)
    return results


def _plot_scale(results: dict[str, Any], path: str, size: int) -> str:
    """Write the scale curve (MB/s by partitions, median with min-max) to ``path``; what was done."""
    points = sorted(
        (int(name.split("/")[1]), r["mb_per_s"])
        for name, r in results.items()
        if name.startswith("scale/") and isinstance(r, dict)
    )
    if not points:
        return "skipped: the scale scenario did not run"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib is not installed (pip install 'croupier[plot]')"
    xs = [p for p, _ in points]
    med = [m["median"] for _, m in points]
    err = [[m["median"] - m["min"] for _, m in points], [m["max"] - m["median"] for _, m in points]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(xs, med, yerr=err, marker="o", capsize=4)
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("partitions")
    ax.set_ylabel("MB/s, end to end (median, min-max)")
    ax.set_title(f"croupier bench scale: {size / 2**20:.0f} MiB, same bytes")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"wrote {path}"


def main_bench(
    scenarios: list[str],
    *,
    ha: bool,
    runs: int,
    commands: int,
    clients: int,
    as_json: bool,
    size: int = 256 * 1024**2,
    mappers: int = 8,
    workers: int = 3,
    partitions: int = 64,
    push_buffer: int = 0,
    plot: str | None = None,
) -> int:
    known = {"control", "raw", "ceiling", "scale", "dask", "actors", "reads"}
    unknown = [s for s in scenarios if s not in known]
    if unknown:
        print(f"croupier bench: unknown or not yet built scenarios {unknown} (built: {sorted(known)})")
        return 2
    results: dict[str, Any] = {}
    data = [s for s in scenarios if s in ("raw", "ceiling", "scale", "actors", "reads")]
    if data:
        results.update(
            data_scenarios(
                data,
                size=size,
                runs=runs,
                mappers=mappers,
                workers=workers,
                partitions=partitions,
                push_buffer=push_buffer,
                plot=plot,
            )
        )
        for key, r in results.items():
            if isinstance(r, dict) and "mb_per_s" in r:
                m = r["mb_per_s"]
                extra = (
                    f", worker peak RSS {r['worker_peak_rss_mib']} MiB" if "worker_peak_rss_mib" in r else ""
                )
                print(
                    f"{key:20s} MB/s median {m['median']:>8}  (min {m['min']}, max {m['max']},"
                    f" {r['runs']} runs{extra})"
                )
            elif isinstance(r, str):
                print(f"{key:20s} {r}")
        for key, v in results.get("ratios", {}).items():
            print(f"{key:28s} {v}")
        if "plot" in results:
            print(f"plot: {results['plot']}")
    if "dask" in scenarios:
        from croupier.tools.bench_dask import dask_scenario

        found = dask_scenario(size=size, runs=runs, workers=workers)["dask"]
        results["dask"] = found
        secs = found["seconds"]
        print(
            f"dask {found['bytes'] / 2**20:.0f} MiB {found['partitions']}->{found['partitions']}: croupier"
            f" {secs['croupier']['median']} s, p2p {secs['p2p']['median']} s, ratio"
            f" {found['ratio_croupier_to_p2p']} (verified {found['verified']})"
        )
    if "control" in scenarios:
        results.update(control_scenarios(ha=ha, runs=runs, commands=commands, clients=clients))
    if as_json:
        print(json.dumps(results))
    return 1 if results.get("failures") else 0


def control_scenarios(*, ha: bool, runs: int, commands: int, clients: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    zk_runs = _ZooKeeperRuns() if ha else None
    modes: dict[str, Any] = {"file": _file_master_rate}
    if zk_runs is not None:
        modes["zookeeper"] = zk_runs
    rates_by_mode: dict[str, list[int]] = {name: [] for name in modes}
    try:
        # interleave the modes, so that both see the same noise on a shared machine
        for run in range(runs):
            for name, fn in modes.items():
                rates_by_mode[name].append(fn(commands, clients, run)["per_s"])
    finally:
        if zk_runs is not None:
            zk_runs.close()
    for name, rates in rates_by_mode.items():
        results[f"control/{name}"] = {
            "median_per_s": statistics.median(rates),
            "min_per_s": min(rates),
            "max_per_s": max(rates),
            "runs": runs,
            "commands": commands,
            "clients": clients,
        }
    for key, r in results.items():
        print(
            f"{key:20s} mapper_end/s median {r['median_per_s']:>8}  (min {r['min_per_s']},"
            f" max {r['max_per_s']}, {r['runs']} runs of {r['commands']} from {r['clients']} clients)"
        )
    if "control/file" in results and "control/zookeeper" in results:
        ratio = results["control/zookeeper"]["median_per_s"] / results["control/file"]["median_per_s"]
        print(f"zookeeper / file log: {ratio:.2f}")
        results["ratio_zookeeper_to_file"] = round(ratio, 3)
    return results
