"""Issue 15: a flush that fails on every dir fails the location without losing what it had
flushed; its buffered bytes go back; pushes that carry seals learn which maps lost data."""

from __future__ import annotations

import errno
import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest

from croupier.actors.flusher import FlusherActor
from croupier.actors.partition_actor import Append, Failures, LostPairs, PartitionActor, SyncJoin
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.limiter import MemoryLimiter
from tests.actors.test_partition_actor import append, batches, commit
from tests.storage.helpers import key

Parts = tuple[pykka.ActorRef[Any], DiskPartitionStore, MemoryLimiter, Failures]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    store = DiskPartitionStore([tmp_path / "a", tmp_path / "b"], fsync=False, reserve=0)
    limiter = MemoryLimiter(1 << 30)
    failures = Failures()
    flushers = [FlusherActor.start(i, limiter) for i in range(2)]
    actor = PartitionActor.start(store, flushers, limiter, flush_bytes=1 << 20, failures=failures)
    try:
        yield actor, store, limiter, failures
    finally:
        actor.stop()
        for f in flushers:
            f.stop()
        store.close()


def synced_append(actor: pykka.ActorRef[Any], limiter: MemoryLimiter, map_id: int, first: int) -> LostPairs:
    """Append two batches of ``map_id`` as a push with seals would: wait until they are on disk."""
    got: queue.SimpleQueue[LostPairs] = queue.SimpleQueue()
    items, size, _ = batches(map_id, [100, 100], first)
    assert limiter.try_acquire(size)
    actor.tell(Append([(key(partition=3), items, size)], SyncJoin(1, got.put)))
    return got.get(timeout=10)


def failing_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    def writev(fd: int, views: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", writev)


def test_a_flush_no_dir_takes_fails_the_location_and_keeps_its_flushed_prefix(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    actor, store, limiter, failures = parts
    assert synced_append(actor, limiter, 0, 0) == []  # map 0 is on disk
    failing_writes(monkeypatch)
    assert synced_append(actor, limiter, 1, 0) == [(1, 3)]  # map 1's batches were lost
    assert failures.lost(key(partition=3)) == frozenset({(1, 0)})
    # a late push to the failed location is dropped and counted lost, its bytes given back
    append(actor, limiter, [(key(partition=3), batches(2, [50])[0], batches(2, [50])[1])])
    monkeypatch.undo()
    report = commit(actor, [key(partition=3)])[key(partition=3)]
    assert report.ok and report.batches == 2  # map 0's two batches, committed
    assert failures.lost(key(partition=3)) == frozenset({(1, 0), (2, 0)})
    assert limiter.used == 0  # nothing of the failed location is still counted
    _, size, raw = batches(0, [100, 100], 0)
    assert store.read(key(partition=3), 0, size) == raw


def test_a_seal_waits_for_the_disk_and_reports_nothing_lost(parts: Parts) -> None:
    actor, _, limiter, failures = parts
    assert synced_append(actor, limiter, 0, 0) == []
    assert limiter.used == 0  # flushed before the answer, though under flush_bytes
    assert len(failures) == 0
