"""Placement: which workers host a shuffle's partitions.

Primary and replica always sit on different workers, and on different hosts
where possible. Eligible workers form a ring ordered by load score, lowest
first (ties broken at random), after dropping workers whose score is above the
discard threshold (0.8) unless too few would remain. Because partition ``p``
goes to ``pairs[p % len(pairs)]``, the first pairs get the extra partitions, so
the least-loaded workers get them.

The score is ``0.5·disk + 0.3·iowait + 0.2·pending`` (each in [0, 1]), smoothed
by an EWMA; see ``load_score`` and ``ewma``. The result is written into the
``ShuffleRegistered`` event, so replay never recomputes it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from croupier.core.errors import NotEnoughWorkers

__all__ = ["DISCARD_THRESHOLD", "Candidate", "ewma", "load_score", "place", "slots_per_worker"]

DISCARD_THRESHOLD = 0.8
Pair = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A worker that may get slots: id, host and free slots."""

    worker_id: str
    host: str
    free_slots: int


def load_score(disk_util: float, io_wait: float, pending_flush: float) -> float:
    """DESIGN §6: ``0.5·disk + 0.3·iowait + 0.2·pending``, inputs clamped to [0, 1]."""

    def clamp(x: float) -> float:
        return min(1.0, max(0.0, x))

    return 0.5 * clamp(disk_util) + 0.3 * clamp(io_wait) + 0.2 * clamp(pending_flush)


def ewma(previous: float | None, sample: float, alpha: float = 0.3) -> float:
    """Exponentially weighted moving average; the first sample stands alone."""
    return sample if previous is None else alpha * sample + (1.0 - alpha) * previous


def slots_per_worker(pairs: Sequence[Pair], num_partitions: int) -> dict[str, int]:
    """How many partition locations each worker hosts under the ``p % len(pairs)`` rule."""
    n = len(pairs)
    out: dict[str, int] = {}
    for i, (primary, replica) in enumerate(pairs):
        count = num_partitions // n + (1 if i < num_partitions % n else 0)
        if count == 0:
            continue
        out[primary] = out.get(primary, 0) + count
        if replica is not None:
            out[replica] = out.get(replica, 0) + count
    return out


def _ring_pairs(ring: Sequence[Candidate], n_pairs: int, replicate: bool) -> list[Pair]:
    pairs: list[Pair] = []
    k = len(ring)
    for i in range(n_pairs):
        primary = ring[i % k]
        replica: str | None = None
        if replicate:
            # the next worker in the ring on another host, else the next worker at all
            others = [ring[(i + j) % k] for j in range(1, k)]
            other_host = [c for c in others if c.host != primary.host]
            replica = (other_host or others)[0].worker_id
        pairs.append((primary.worker_id, replica))
    return pairs


def place(
    candidates: Sequence[Candidate],
    num_partitions: int,
    replicate: bool,
    rng: random.Random,
    *,
    loads: Mapping[str, float] | None = None,
) -> tuple[Pair, ...]:
    """Choose the worker pairs for a shuffle (or for one revived partition).

    Parameters:
        candidates: eligible workers (active, not excluded or decommissioning).
        num_partitions: partitions that will be spread over the pairs.
        replicate: whether each pair gets a replica on another worker.
        rng: the only source of randomness (it breaks ties in load score).
        loads: worker -> score in [0, 1]; missing workers count as 0.

    Raises:
        NotEnoughWorkers: too few workers (2 are needed with replication) or slots.
    """
    need = 2 if replicate else 1
    pool = [c for c in candidates if c.free_slots > 0]
    loads = loads or {}
    cool = [c for c in pool if loads.get(c.worker_id, 0.0) <= DISCARD_THRESHOLD]
    if len(cool) >= need:
        pool = cool
    # shuffle first so that ties in score are broken at random, then sort (stable)
    pool = sorted(pool, key=lambda c: c.worker_id)
    rng.shuffle(pool)
    pool.sort(key=lambda c: loads.get(c.worker_id, 0.0))

    # drop workers whose free slots can't take their share, most overloaded first
    while len(pool) >= need:
        pairs = _ring_pairs(pool, min(num_partitions, len(pool)), replicate)
        usage = slots_per_worker(pairs, num_partitions)
        free = {c.worker_id: c.free_slots for c in pool}
        over = [w for w, used in usage.items() if used > free[w]]
        if not over:
            return tuple(pairs)
        worst = max(over, key=lambda w: (usage[w] - free[w], w))
        pool = [c for c in pool if c.worker_id != worst]
    total_free = sum(c.free_slots for c in candidates)
    raise NotEnoughWorkers(
        f"cannot place {num_partitions} partitions"
        f"{' with replication' if replicate else ''}: {len(candidates)} eligible workers"
        f" with {total_free} free slots in all ({need} workers needed at least)"
    )
