"""``croupier bench --scenarios throttle``: a quiet app's throughput beside a flooding app.

One run has three phases, interleaved run by run, each on a one-worker cluster (the
master and the worker are subprocesses; unreplicated shuffles):

- ``solo``: the quiet app alone, pushing at a modest paced rate;
- ``flood``: the same, while a second app pushes as fast as it can (started a little
  earlier), on a worker with throttling off (``--no-throttle``);
- ``flood-throttled``: the same on a worker with throttling on, with a small window and
  floor so that it engages within the run.

Each app is a process of its own. The quiet app's throughput is its bytes over the time
from its first write to its writer's ``close()`` (every batch acknowledged); it is
reported as a ratio of its ``solo`` median, with and without throttling. The flooder's
rate (bytes written, which its writer's back-pressure keeps close to the bytes taken)
and its ``CONGESTED`` retries are reported beside it. Runs in the caller's thread;
every process it starts is stopped before it returns.
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

__all__ = ["PHASES", "flood_task", "quiet_task", "throttle_scenario"]

PHASES = ("solo", "flood", "flood-throttled")
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


def flood_task(url: str, stop: str, limit: float) -> dict[str, float]:
    """Register an app and write as fast as it can until the file ``stop`` exists (or ``limit`` s)."""
    import croupier

    record = os.urandom(_FLOOD_RECORD)
    with croupier.connect(url) as client:
        app = client.register_app("flood")
        writer = app.register_shuffle(1, _PARTITIONS, replicate=False).writer(0)
        start = time.perf_counter()
        i = 0
        while not os.path.exists(stop) and time.perf_counter() - start < limit:
            writer.write(i % _PARTITIONS, record)
            i += 1
        took = time.perf_counter() - start
        stats = writer.stats
        writer.abort()
        app.unregister()
    return {"mb_per_s": stats["bytes"] / took / 1e6, "congested": stats["congested"]}


def _warm() -> int:
    import croupier

    return len(croupier.__all__)


def _phase(
    pool: ProcessPoolExecutor, url: str, flood: bool, stop: Path, *, rate: float, seconds: float
) -> dict[str, Any]:
    """One phase: the quiet app (after the flooder's head start, if any); both apps' figures."""
    flooding = pool.submit(flood_task, url, str(stop), seconds * 10 + 60) if flood else None
    quiet = pool.submit(quiet_task, url, rate, seconds, 2.0 if flood else 0.0)
    try:
        out: dict[str, Any] = {"quiet": quiet.result()}
    finally:
        stop.touch()
        if flooding is not None:
            found = flooding.result()
    if flooding is not None:
        out["flood"] = found
    return out


def _median(values: list[float], digits: int = 2) -> float:
    return round(statistics.median(values), digits)


def _summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, found in samples.items():
        quiet = [s["quiet"]["mb_per_s"] for s in found]
        entry: dict[str, Any] = {
            "quiet_mb_per_s": {"median": _median(quiet), "min": _median([min(quiet)]), "max": max(quiet)},
            "quiet_congested": [s["quiet"]["congested"] for s in found],
            "runs": len(found),
        }
        if "flood" in found[0]:
            entry["flood_mb_per_s"] = _median([s["flood"]["mb_per_s"] for s in found])
            entry["flood_congested"] = [s["flood"]["congested"] for s in found]
        out[phase] = entry
    solo = out["solo"]["quiet_mb_per_s"]["median"]
    out["ratios"] = {
        f"quiet_{phase.replace('-', '_')}_to_solo": round(out[phase]["quiet_mb_per_s"]["median"] / solo, 3)
        for phase in PHASES[1:]
    }
    return out


def throttle_scenario(
    *,
    runs: int,
    seconds: float = 8.0,
    rate: float = 8e6,
    window: float = 5.0,
    floor: int = 20_000_000,
    z: float = 3.0,
    memory: int = 1024**3,
) -> dict[str, Any]:
    """Run the three phases ``runs`` times, interleaved; their figures and the ratios to ``solo``.

    Parameters:
        seconds: how long the quiet app writes in each phase.
        rate: the quiet app's paced rate, bytes per second.
        window, floor, z: the throttled worker's settings.
        memory: both workers' memory cap.
    """
    from croupier.services.local import LocalCluster

    configs = {
        "off": WorkerConfig(heartbeat_interval=1.0, memory_cap=memory, throttle_window=0.0),
        "on": WorkerConfig(
            heartbeat_interval=1.0,
            memory_cap=memory,
            throttle_window=window,
            throttle_floor=floor,
            throttle_z=z,
        ),
    }
    samples: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="croupier-throttle-")))
        clusters = {
            name: stack.enter_context(LocalCluster(1, tmp / name, processes=True, worker_config=config))
            for name, config in configs.items()
        }
        ctx = multiprocessing.get_context("spawn")
        pool = stack.enter_context(ProcessPoolExecutor(2, mp_context=ctx))
        for warm in [pool.submit(_warm) for _ in range(2)]:
            warm.result()
        for r in range(runs):
            for phase in PHASES:
                cluster = clusters["on" if phase == "flood-throttled" else "off"]
                stop = tmp / f"stop-{r}-{phase}"
                found = _phase(
                    pool, cluster.master_url, phase != "solo", stop, rate=rate, seconds=seconds
                )
                samples[phase].append(found)
    out = _summary(samples)
    out["settings"] = {
        "quiet_rate_mb_per_s": rate / 1e6,
        "seconds": seconds,
        "throttle_window": window,
        "throttle_floor_mb_per_s": floor / 1e6,
        "throttle_z": z,
        "worker_memory_cap_mib": memory / 2**20,
    }
    return out
