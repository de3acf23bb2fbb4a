"""``croupier bench --scenarios small-reads``: the read latency of many small partitions.

Two local clusters run side by side in one invocation, each a master and 2 workers as
subprocesses: one with the memory tier off (``--memory-tier-max 0``), one with it on
(the defaults: 1 MiB, 10 % of ``--memory``). Each holds one replicated shuffle of
``partitions`` partitions of ``size`` bytes (records of 1 KiB, one writer). Each run,
on each cluster, reads every partition three ways and reports milliseconds per partition:

- ``reader``: ``Shuffle.reader(p)`` one partition at a time;
- ``readers-stream``: ``Shuffle.readers(..., small_batch=0)``, every reader on its own
  (OPEN_STREAM and FETCH_CHUNK 0, two readers ahead: the path before FETCH_SMALL);
- ``readers``: ``Shuffle.readers(...)`` with its default ``FETCH_SMALL`` groups.

Every read is checked (record count and bytes). The order of the clusters and of the
modes alternates run by run. Runs in the caller's thread; stops every process it starts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

__all__ = ["small_reads_scenario"]

_RECORD = 1024
_MODES = ("reader", "readers-stream", "readers")


def _write(shuffle: Any, partitions: int, size: int) -> None:
    per = max(1, size // _RECORD)
    writer = shuffle.writer(0)
    for p in range(partitions):
        record = bytes([p % 251]) * _RECORD
        for _ in range(per):
            writer.write(p, record)
    if not writer.close():
        raise RuntimeError("the small-reads shuffle did not write")


def _readers_of(shuffle: Any, mode: str, partitions: int) -> Iterator[Any]:
    if mode == "reader":
        return (shuffle.reader(p) for p in range(partitions))
    batch = 0 if mode == "readers-stream" else 128
    return iter(shuffle.readers(range(partitions), small_batch=batch))


def _read(shuffle: Any, mode: str, partitions: int, size: int) -> float:
    """Seconds per partition to read them all ``mode``'s way; raises on a wrong read."""
    per = max(1, size // _RECORD)
    start = time.perf_counter()
    count = 0
    for reader in _readers_of(shuffle, mode, partitions):
        count += sum(1 for _ in reader)
    elapsed = time.perf_counter() - start
    if count != per * partitions:
        raise RuntimeError(f"{mode}: {count} records read, not {per * partitions}")
    return elapsed / partitions


def small_reads_scenario(*, runs: int, partitions: int = 1000, size: int = 10 * 1024) -> dict[str, Any]:
    """Read ``partitions`` partitions of ``size`` bytes ``runs`` times per mode, tier off and on."""
    import croupier
    from croupier.services.local import LocalCluster

    tiers = {"tier-off": ["--memory-tier-max", "0"], "tier-on": []}
    seconds: dict[str, list[float]] = {f"{t}/{m}": [] for t in tiers for m in _MODES}
    with ExitStack() as stack:
        shuffles: dict[str, Any] = {}
        for tier, args in tiers.items():
            cluster = stack.enter_context(LocalCluster(workers=2, processes=True, worker_args=args))
            client = stack.enter_context(croupier.connect(cluster.master_url))
            shuffles[tier] = client.register_app(f"small-{tier}").register_shuffle(1, partitions)
            _write(shuffles[tier], partitions, size)
            _read(shuffles[tier], "readers", partitions, size)  # warm up: commit, connections
        order: list[tuple[str, str]] = [(t, m) for t in tiers for m in _MODES]
        for run in range(runs):
            for tier, mode in order if run % 2 == 0 else reversed(order):
                seconds[f"{tier}/{mode}"].append(_read(shuffles[tier], mode, partitions, size))
    ms = {k: _ms(v) for k, v in seconds.items()}
    med: Callable[[str], float] = lambda k: ms[k]["median"]  # noqa: E731
    return {
        "partitions": partitions,
        "partition_bytes": size,
        "runs": runs,
        "ms_per_partition": ms,
        "ratios": {
            "readers tier-on / readers-stream tier-off": round(
                med("tier-on/readers") / med("tier-off/readers-stream"), 3
            ),
            "readers tier-on / readers tier-off": round(med("tier-on/readers") / med("tier-off/readers"), 3),
        },
    }


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values) * 1000, 3),
        "min": round(min(values) * 1000, 3),
        "max": round(max(values) * 1000, 3),
    }
