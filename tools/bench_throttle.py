"""``croupier bench --scenarios throttle``: a quiet app's throughput beside a flooding app.

Each app is a process of its own, on single-worker clusters (master and worker are
subprocesses; unreplicated shuffles). One run has these phases, interleaved run by run:

- ``solo``: the quiet app alone, pushing at a modest paced rate (30 MB/s);
- ``flood/CAP``: the same while a second app pushes as fast as it can (two processes,
  one map each, from 2 s earlier), on a worker with throttling off and a memory cap of CAP;
- ``flood-throttled/CAP``: the same on a worker with throttling on, with a small window
  (5 s) and floor (20 MB/s) so that it engages within the phase.

CAP is 64 MiB (the flood fills it within a phase: the memory-bound case, where the
worker answers every app ``CONGESTED``) and the default 1 GiB (it does not: the two
apps only share the CPU). The quiet app's throughput is its bytes over the time from
its first write to its writer's ``close()`` (every batch acknowledged), reported as a
ratio of its ``solo`` median. Beside it: the flooder's rate (bytes written, which its
writer's back-pressure keeps near the bytes taken) and both apps' ``CONGESTED`` retries.
Runs in the caller's thread; every process it starts is stopped before it returns.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from croupier.core.config import WorkerConfig

__all__ = ["flood_task", "quiet_task", "throttle_scenario"]

_RECORD = 16 * 1024
_FLOOD_RECORD = 64 * 1024
_PARTITIONS = 8


def quiet_task(url: str, rate: float, seconds: float, delay: float) -> dict[str, float]:
    """Register an app, write ``rate`` bytes/s for ``seconds`` (after ``delay``), close; its figures."""
    import croupier
    from croupier.core.config import ClientConfig

    time.sleep(delay)
    record = os.urandom(_RECORD)
    # a small writer buffer: back-pressure shows while it writes, not only at close
    config = ClientConfig(writer_memory_limit=2 * 1024**2)
    with croupier.connect(url, config=config) as client:
        app = client.register_app("quiet")
        writer = app.register_shuffle(1, _PARTITIONS, replicate=False).writer(0)
        written = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            ahead = written - rate * elapsed
            if ahead > 0:
                time.sleep(min(0.01, ahead / rate))
                continue
            writer.write(written // _RECORD % _PARTITIONS, record)
            written += _RECORD
        writer.close()
        took = time.perf_counter() - start
        congested = writer.stats["congested"]
        app.unregister()
    return {"bytes": written, "seconds": took, "mb_per_s": written / took / 1e6, "congested": congested}


def flood_task(url: str, handle: str, map_id: int, stop: str, limit: float) -> dict[str, float]:
    """Write map ``map_id`` of the flooding app's shuffle (``Shuffle.handle()``: a cluster with
    a secret opens a shuffle by handle) as fast as it can, until the file ``stop`` exists (or
    ``limit`` s); then abort the writer."""
    import croupier

    record = os.urandom(_FLOOD_RECORD)
    with croupier.connect(url) as client:
        writer = client.open_shuffle(handle).writer(map_id)
        start = time.perf_counter()
        i = 0
        while not os.path.exists(stop) and time.perf_counter() - start < limit:
            writer.write(i % _PARTITIONS, record)
            i += 1
        took = time.perf_counter() - start
        stats = writer.stats
        writer.abort()
    return {"mb_per_s": stats["bytes"] / took / 1e6, "congested": stats["congested"]}


def _warm() -> int:
    import croupier

    return len(croupier.__all__)


def _phase(
    pool: ProcessPoolExecutor, url: str, flooders: int, stop: Path, *, rate: float, seconds: float
) -> dict[str, Any]:
    """One phase: the quiet app (after the flooders' head start, if any); both apps' figures."""
    import croupier

    with croupier.connect(url) as client:
        app = client.register_app("flood")
        shuffle = app.register_shuffle(max(1, flooders), _PARTITIONS, replicate=False)
        flooding = [
            pool.submit(flood_task, url, shuffle.handle(), m, str(stop), seconds * 10 + 60)
            for m in range(flooders)
        ]
        quiet = pool.submit(quiet_task, url, rate, seconds, 2.0 if flooders else 0.0)
        try:
            out: dict[str, Any] = {"quiet": quiet.result()}
        finally:
            stop.touch()
            found = [f.result() for f in flooding]
            app.unregister()
    if found:
        out["flood"] = {
            "mb_per_s": sum(f["mb_per_s"] for f in found),
            "congested": sum(f["congested"] for f in found),
        }
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def _summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, found in samples.items():
        quiet = [s["quiet"]["mb_per_s"] for s in found]
        entry: dict[str, Any] = {
            "quiet_mb_per_s": {
                "median": _median(quiet),
                "min": round(min(quiet), 2),
                "max": round(max(quiet), 2),
            },
            "quiet_congested": [s["quiet"]["congested"] for s in found],
            "runs": len(found),
        }
        if "flood" in found[0]:
            entry["flood_mb_per_s"] = _median([s["flood"]["mb_per_s"] for s in found])
            entry["flood_congested"] = [s["flood"]["congested"] for s in found]
        out[phase] = entry
    solo = out["solo"]["quiet_mb_per_s"]["median"]
    out["ratios"] = {
        f"quiet_{phase}_to_solo": round(out[phase]["quiet_mb_per_s"]["median"] / solo, 3)
        for phase in samples
        if phase != "solo"
    }
    return out


def _mib(n: int) -> str:
    return f"{n // 2**30}GiB" if n % 2**30 == 0 else f"{n // 2**20}MiB"


def _clusters(
    stack: ExitStack, tmp: Path, memories: tuple[int, ...], window: float, floor: int, z: float
) -> dict[str, Any]:
    """One single-worker cluster per (memory cap, throttling off or on), by phase name."""
    from croupier.services.local import LocalCluster

    clusters: dict[str, Any] = {}
    for memory in memories:
        for throttled in (False, True):
            config = WorkerConfig(
                heartbeat_interval=1.0,
                memory_cap=memory,
                throttle_window=window if throttled else 0.0,
                throttle_floor=floor,
                throttle_z=z,
            )
            name = f"{'flood-throttled' if throttled else 'flood'}/{_mib(memory)}"
            path = tmp / name.replace("/", "-")
            clusters[name] = stack.enter_context(LocalCluster(1, path, processes=True, worker_config=config))
    return clusters


def throttle_scenario(
    *,
    runs: int,
    seconds: float = 5.0,
    rate: float = 30e6,
    window: float = 5.0,
    floor: int = 20_000_000,
    z: float = 3.0,
    memories: tuple[int, ...] = (64 * 2**20, 2**30),
    flooders: int = 2,
) -> dict[str, Any]:
    """Run the phases ``runs`` times, interleaved; their figures and the ratios to ``solo``.

    The phases: ``solo`` (on the first cluster), then for each worker memory cap of
    ``memories`` ``flood/CAP`` (throttling off) and ``flood-throttled/CAP``.

    Parameters:
        seconds: how long the quiet app writes in each phase.
        rate: the quiet app's paced rate, bytes per second.
        window, floor, z: the throttled workers' settings.
        memories: the workers' memory caps: a small one fills under the flood within a
            phase (the memory-bound case), the default 1 GiB does not (CPU only).
        flooders: processes writing the flooding app's shuffle, one map each.
    """
    samples: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="croupier-throttle-")))
        clusters = _clusters(stack, tmp, memories, window, floor, z)
        ctx = multiprocessing.get_context("spawn")
        pool = stack.enter_context(ProcessPoolExecutor(flooders + 1, mp_context=ctx))
        for warm in [pool.submit(_warm) for _ in range(flooders + 1)]:
            warm.result()
        phases = [("solo", next(iter(clusters.values()))), *clusters.items()]
        for r in range(runs):
            for phase, cluster in phases:
                stop = tmp / f"stop-{r}-{phase.replace('/', '-')}"
                found = _phase(
                    pool,
                    cluster.master_url,
                    0 if phase == "solo" else flooders,
                    stop,
                    rate=rate,
                    seconds=seconds,
                )
                samples.setdefault(phase, []).append(found)
    out = _summary(samples)
    out["settings"] = {
        "quiet_rate_mb_per_s": rate / 1e6,
        "seconds": seconds,
        "throttle_window": window,
        "throttle_floor_mb_per_s": floor / 1e6,
        "throttle_z": z,
        "worker_memory_caps": [_mib(m) for m in memories],
        "flood_processes": flooders,
    }
    return out
