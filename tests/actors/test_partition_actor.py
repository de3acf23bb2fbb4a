"""``PartitionActor`` owning a shard of locations, over the in-memory store and a real flusher."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from croupier.actors.flusher import FlusherActor
from croupier.actors.partition_actor import (
    FLUSH_FLOOR,
    PRESSURE,
    Append,
    Batches,
    Commit,
    Drop,
    PartitionActor,
    shard_of,
)
from croupier.core.batch import BATCH_HEADER
from croupier.core.dataplane import LocationReport
from croupier.core.enums import CopyRole
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import LocationKey, MemoryPartitionStore
from tests.storage.helpers import batch, key, seal

Parts = tuple[pykka.ActorRef[Any], MemoryPartitionStore, MemoryLimiter]


@pytest.fixture
def parts() -> Iterator[Parts]:
    store = MemoryPartitionStore()
    limiter = MemoryLimiter(1 << 30)
    flusher = FlusherActor.start(0, limiter)
    actor = PartitionActor.start(store, [flusher], limiter, flush_bytes=300, chunk_size=1000)
    try:
        yield actor, store, limiter
    finally:
        actor.stop()
        flusher.stop()
        store.close()


def batches(map_id: int, sizes: list[int], first: int = 0) -> tuple[Batches, int, bytes]:
    """Batches as the worker hands them over (memory views), their byte count, and their file bytes."""
    out: Batches = []
    raw_all = b""
    for i, n in enumerate(sizes):
        header, raw = batch(map_id, 0, first + i, bytes([65 + i % 26]) * n)
        view = memoryview(raw)
        out.append((header, view[: BATCH_HEADER.size], view[BATCH_HEADER.size :]))
        raw_all += raw
    return out, len(raw_all), raw_all


def append(
    actor: pykka.ActorRef[Any], limiter: MemoryLimiter, groups: list[tuple[LocationKey, Batches, int]]
) -> None:
    assert limiter.try_acquire(sum(g[2] for g in groups))
    actor.tell(Append(groups))


def commit(actor: pykka.ActorRef[Any], keys: list[LocationKey]) -> dict[LocationKey, LocationReport]:
    replies: queue.SimpleQueue[LocationReport] = queue.SimpleQueue()
    actor.tell(Commit(keys, replies.put))
    reports = [replies.get(timeout=10) for _ in keys]
    by_key = {
        LocationKey(k.app_id, k.shuffle_id, r.partition, r.epoch, r.role): r
        for k, r in zip(keys, reports, strict=True)
    }
    assert set(by_key) == set(keys)
    return by_key


def test_one_actor_keeps_many_locations_apart_and_commits_each(parts: Parts) -> None:
    actor, store, limiter = parts
    keys = [key(partition=p) for p in range(5)] + [
        key(partition=0, role=CopyRole.REPLICA),
        key(partition=0, epoch=1),
    ]
    expected: dict[LocationKey, bytes] = {k: b"" for k in keys}
    for rnd in range(4):  # several Appends, each for several locations, interleaved
        groups = []
        for i, k in enumerate(keys):
            bs, n, raw = batches(i, [50 + 40 * rnd, 7], first=2 * rnd)
            groups.append((k, bs, n))
            expected[k] += raw
        append(actor, limiter, groups)
    header, seal_raw = seal(3, 0, 8)
    view = memoryview(seal_raw)
    append(actor, limiter, [(keys[3], [(header, view, view[BATCH_HEADER.size :])], len(seal_raw))])
    expected[keys[3]] += seal_raw
    reports = commit(actor, keys)
    for k in keys:
        report = reports[k]
        assert report.ok, report
        assert report.bytes == len(expected[k])
        assert report.batches == 8  # data batches; the seal is counted in "seals"
        cf = store.committed(k)
        assert cf is not None
        assert store.read(k, 0, cf.index.size) == expected[k]
    assert reports[keys[3]].seals == ((3, 0, 8),)
    assert limiter.used == 0  # every byte went back once flushed


def test_late_appends_after_a_commit_are_dropped_and_released(parts: Parts) -> None:
    actor, _, limiter = parts
    k = key(partition=2)
    bs, n, raw = batches(1, [100])
    append(actor, limiter, [(k, bs, n)])
    assert commit(actor, [k])[k].bytes == len(raw)
    late, n2, _ = batches(2, [100])
    append(actor, limiter, [(k, late, n2)])
    assert commit(actor, [k])[k].bytes == len(raw)  # a second commit reports the same file
    assert limiter.used == 0


def test_a_location_never_appended_to_commits_empty(parts: Parts) -> None:
    actor, store, _ = parts
    k = key(partition=9)
    report = commit(actor, [k])[k]
    assert report.ok and report.bytes == 0 and report.batches == 0
    assert store.committed(k) is not None


def test_drop_gives_back_unflushed_bytes_and_forgets_the_location(parts: Parts) -> None:
    actor, store, limiter = parts
    small, big = key(partition=1), key(partition=2)
    bs, n, _ = batches(1, [20])  # below flush_bytes: stays pending
    bs2, n2, _ = batches(2, [400, 400])  # flushed
    append(actor, limiter, [(small, bs, n), (big, bs2, n2)])
    actor.ask(Drop([small, big]))
    actor.ask(Drop([small]))  # twice is harmless
    # every byte is back: the pending ones at the Drop, the flushed ones by the flusher
    deadline = time.monotonic() + 10
    while limiter.used and time.monotonic() < deadline:
        time.sleep(0.01)
    assert limiter.used == 0
    assert store.committed(small) is None and store.committed(big) is None


def test_stopping_gives_back_every_pending_byte() -> None:
    store = MemoryPartitionStore()
    limiter = MemoryLimiter(1 << 30)
    flusher = FlusherActor.start(0, limiter)
    actor = PartitionActor.start(store, [flusher], limiter, flush_bytes=1 << 20)
    bs, n, _ = batches(1, [100, 200])
    append(actor, limiter, [(key(partition=p), bs, n) for p in range(3)])
    actor.stop()
    flusher.stop()
    store.close()
    assert limiter.used == 0


def test_shards_spread_locations_evenly() -> None:
    counts = [0] * 4
    for p in range(400):
        for role in ("primary", CopyRole.REPLICA):
            counts[shard_of(key(partition=p, role=role), 4)] += 1
    assert min(counts) >= 150, counts
    assert shard_of(key(partition=5), 4) == shard_of(key(partition=5), 4)


def test_under_memory_pressure_a_location_flushes_at_the_floor() -> None:
    """Issue 25: flushes are 1 MiB while the worker's buffers are low, and FLUSH_FLOOR once the
    limiter holds PRESSURE of its cap, so that few partly filled buffers wait for a commit."""
    store = MemoryPartitionStore()
    limiter = MemoryLimiter(8 << 20)  # pressure from 1 MiB on
    assert int(limiter.cap * PRESSURE) == 1 << 20
    flusher = FlusherActor.start(0, limiter)
    actor = PartitionActor.start(store, [flusher], limiter, flush_bytes=1 << 20)
    try:
        k = key(partition=1)
        bs, n, _ = batches(1, [FLUSH_FLOOR + 1000])
        append(actor, limiter, [(k, bs, n)])
        actor.ask(Drop([]))  # the Append is handled
        time.sleep(0.05)
        assert limiter.used == n  # over the floor, under 1 MiB, no pressure: still buffered
        assert limiter.try_acquire(1 << 20)  # other buffered data: pressure
        more, n2, _ = batches(1, [10], first=1)
        append(actor, limiter, [(k, more, n2)])
        deadline = time.monotonic() + 10
        while limiter.used > 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert limiter.used == 1 << 20  # the location's buffer was flushed (and released)
        limiter.release(1 << 20)
    finally:
        actor.stop()
        flusher.stop()
        store.close()
