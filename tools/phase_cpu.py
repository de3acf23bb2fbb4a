"""The workers' CPU per GiB of each phase alone: pushes into new shuffles, then reads of one
pushed shuffle again and again (issue 25). ``croupier bench`` times a whole shuffle; a change
to one side is seen better here, with repeats of that side on one cluster.

    python -m croupier.tools.phase_cpu [--size 512MiB] [--partitions 64] [--reps 5]

Prints one JSON line: the workers' CPU-s per GiB of each push and of each read (every read
verified as ``croupier demo`` does), their medians, and the pushes' and the reads' CPU-s per
GiB per kind of thread (``push_threads``, ``read_threads``: the workers' threads by their OS
names, ``ops/thread_names.py``; ``ZMQbg/IO`` is ZeroMQ's I/O thread).

A push's figure includes the work it leaves behind: the workers flush and commit their
copies after the master has the mappers' ends, so a push is measured until the workers'
CPU settles (:func:`settle`), not when ``summary()`` returns. Without that, a push of many
small partitions left most of its cost to the first read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from croupier.core.config import WorkerConfig
from croupier.tools.demo import _Bar, _check, _Job, _push, _read, _record_plan
from croupier.tools.proc import cpu_seconds, thread_cpu, thread_cpu_delta

__all__ = ["phase_cpu", "settle"]

IDLE_CPU_S = 0.05  # the workers' CPU-s in one step of SETTLE_STEP_S, at most, once settled
SETTLE_STEP_S = 0.5


def settle(cpu: Callable[[], float], *, timeout: float = 120.0) -> float:
    """Wait until ``cpu()`` (CPU-s so far) grows by at most ``IDLE_CPU_S`` in a step of
    ``SETTLE_STEP_S``; its value then, less that quiet step's growth (after ``timeout``
    seconds, its value then)."""
    deadline = time.monotonic() + timeout
    last = cpu()
    while True:
        time.sleep(SETTLE_STEP_S)
        now = cpu()
        if now - last <= IDLE_CPU_S:
            return last
        if time.monotonic() > deadline:
            return now
        last = now


def phase_cpu(
    size: int,
    *,
    partitions: int = 64,
    mappers: int = 8,
    workers: int = 3,
    reps: int = 5,
    replicate: bool = True,
) -> dict[str, Any]:
    """``reps`` pushes of ``size`` bytes into new shuffles, then ``reps`` reads of the last one."""
    import croupier
    from croupier.services.local import LocalCluster

    budget = max(1, size // mappers)
    expected = [sum(1 for _ in _record_plan(m, budget)) for m in range(mappers)]
    pushes: list[float] = []
    with (
        LocalCluster(workers, processes=True, worker_config=WorkerConfig(heartbeat_interval=1.0)) as cluster,
        croupier.connect(cluster.master_url) as client,
    ):
        app = client.register_app("phase-cpu")
        pids = cluster.worker_pids()

        def cpu() -> float:
            return sum(cpu_seconds(pid) for pid in pids)

        job: _Job | None = None
        sh: Any = None
        written = 0
        threads_at = thread_cpu(pids)
        for _ in range(reps):
            if sh is not None:
                sh.unregister()
            sh = app.register_shuffle(num_mappers=mappers, num_partitions=partitions, replicate=replicate)
            job = _Job(cluster.master_url, sh.handle(), mappers, partitions, 2, "", 0.0)
            before = cpu()
            _, _, written, _ = _push(job, budget, 0, _Bar(False, size))
            sh.summary()  # committed at the master; the workers may still flush and commit
            pushes.append((settle(cpu) - before) / (written / 2**30))
        if job is None:
            raise ValueError("reps must be at least 1")
        threads_pushed = thread_cpu(pids)
        reads = _reads(job, reps, cpu, expected, written)
        threads_read = thread_cpu(pids)
    gib = reps * written / 2**30
    return {
        "bytes": written,
        "partitions": partitions,
        "replicate": replicate,
        "push_cpu_s_per_gib": [round(x, 3) for x in pushes],
        "read_cpu_s_per_gib": [round(x, 3) for x in reads],
        "push_median": round(statistics.median(pushes), 3),
        "read_median": round(statistics.median(reads), 3),
        "push_threads": _per_gib(thread_cpu_delta(threads_at, threads_pushed), gib),
        "read_threads": _per_gib(thread_cpu_delta(threads_pushed, threads_read), gib),
    }


def _reads(job: _Job, reps: int, cpu: Callable[[], float], expected: list[int], written: int) -> list[float]:
    """``reps`` verified reads of ``job``'s shuffle; the workers' CPU-s per GiB of each."""
    reads: list[float] = []
    for _ in range(reps):
        before = cpu()
        _, results = _read(job, True, _Bar(False, written))
        reads.append((cpu() - before) / (written / 2**30))
        errors = _check(results, expected, written)
        if errors:
            raise RuntimeError(f"a read did not verify: {errors[:3]}")
    return reads


def _per_gib(seconds: dict[str, float], gib: float) -> dict[str, float]:
    """CPU-s per GiB of each thread kind that used any, the busiest first."""
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])
    return {kind: round(s / gib, 3) for kind, s in ranked if s > 0}


def main(argv: list[str] | None = None) -> int:
    from croupier.core.config import parse_size

    parser = argparse.ArgumentParser(prog="python -m croupier.tools.phase_cpu")
    parser.add_argument("--size", default="512MiB")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(phase_cpu(parse_size(args.size), partitions=args.partitions, reps=args.reps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
