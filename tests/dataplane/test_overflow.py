"""``OverflowStore`` (issue 26, "Overflow"): a location goes to the object store when the disks are
full (created there, or moved there when a disk write fails for lack of space), becomes one final
object with its index object at commit, is read from it, and is reported to the offload as done."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.errors import Conflict, NotCommitted, Unavailable, UnknownShuffle
from croupier.dataplane.offload import Offloader
from croupier.dataplane.overflow import OverflowStore, overflowed_keys
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.index import IndexBuilder
from croupier.storage.store import LocationKey, MemoryPartitionFile, MemoryPartitionStore, PartitionFile
from croupier.transports.objstore import MemoryObjectStore
from tests.storage.helpers import append, batch, key


class _FillingFile(MemoryPartitionFile):
    """A memory file whose disk runs out of space once it holds ``room`` bytes."""

    room = 1 << 62

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        if self.size + sum(len(p) for p in pieces) > self.room:
            raise Unavailable(f"cannot write {self.key.name}: [ENOSPC] No space left", {"no_space": True})
        super().write(pieces)


class _FillingStore(MemoryPartitionStore):
    def create(self, key: LocationKey) -> MemoryPartitionFile:
        f = super().create(key)
        assert isinstance(f, MemoryPartitionFile)
        f.__class__ = _FillingFile
        return f


@pytest.fixture
def objects() -> MemoryObjectStore:
    return MemoryObjectStore()


@pytest.fixture
def full_disks(tmp_path: Path, objects: MemoryObjectStore) -> Iterator[OverflowStore]:
    """Real disk dirs whose reserve no filesystem has: every dir is past it."""
    store = OverflowStore(DiskPartitionStore([tmp_path / "d0", tmp_path / "d1"], reserve=1 << 62), objects)
    yield store
    store.close()


def _write(f: PartitionFile, n: int, size: int = 3000) -> tuple[IndexBuilder, bytes]:
    builder, data = IndexBuilder(10_000), b""
    for i in range(n):
        data += append(f, builder, [batch(0, 0, i, os.urandom(size))])
    return builder, data


def test_a_location_created_on_full_disks_is_one_final_object_with_its_index(
    full_disks: OverflowStore, objects: MemoryObjectStore, tmp_path: Path
) -> None:
    k = key(partition=3)
    f = full_disks.create(k)
    builder, data = _write(f, 20)
    data_key, index_key = overflowed_keys(k)
    assert objects.size(data_key) is None  # nothing is visible before the commit
    with pytest.raises(NotCommitted):
        full_disks.read(k, 0, 1)
    assert full_disks.committed(k) is None
    index = builder.build()
    done = f.commit(index)
    assert done.index == index and full_disks.committed(k) == done
    assert objects.get_range(data_key, 0, len(data)) == data
    body = json.loads(objects.get_range(index_key, 0, objects.size(index_key) or 0))
    assert body == {"index": index.to_json(), "size": len(data), "blake3": blake3.blake3(data).hexdigest()}
    assert full_disks.read(k, 100, 50) == data[100:150]
    assert [cf.key for cf in full_disks.scan(k.app_id, k.shuffle_id)] == [k]
    assert not list(tmp_path.rglob("*.data"))  # nothing went to the disks
    assert full_disks.offloaded(k) == (len(data), blake3.blake3(data).hexdigest())
    assert full_disks.stats()["created"] == 1 and full_disks.stats()["committed"] == 1
    with pytest.raises(Conflict):
        full_disks.create(k)


def test_a_disk_file_that_runs_out_of_space_moves_to_the_object_store_and_the_write_succeeds(
    objects: MemoryObjectStore,
) -> None:
    store = OverflowStore(_FillingStore(), objects)
    k = key(partition=1)
    f = store.create(k)
    _FillingFile.room = 20_000
    try:
        builder, data = _write(f, 15)  # 45 KB: the disk took the first 6 writes
    finally:
        _FillingFile.room = 1 << 62
    assert f.size == len(data)
    assert store.inner.committed(k) is None
    f.commit(builder.build())
    assert store.read(k, 0, len(data)) == data
    assert objects.get_range(overflowed_keys(k)[0], 0, len(data)) == data
    assert store.stats()["moved"] == 1


def test_past_max_open_a_location_fails_as_a_full_disk_did(
    tmp_path: Path, objects: MemoryObjectStore
) -> None:
    store = OverflowStore(DiskPartitionStore([tmp_path / "d"], reserve=1 << 62), objects, max_open=2)
    try:
        a, b = store.create(key(partition=0)), store.create(key(partition=1))
        with pytest.raises(Unavailable) as info:
            store.create(key(partition=2))
        assert info.value.details == {"no_space": True}
        a.abort()  # an aborted location leaves no object and frees its place
        c = store.create(key(partition=2))
        for f in (b, c):
            f.commit(_write(f, 1)[0].build())
        assert objects.size(overflowed_keys(key(partition=0))[0]) is None
        assert store.stats()["refused"] == 1
    finally:
        store.close()


def test_remove_forgets_overflowed_locations_and_gives_up_open_uploads(
    full_disks: OverflowStore, objects: MemoryObjectStore
) -> None:
    done, open_ = full_disks.create(key(partition=0)), full_disks.create(key(partition=1))
    done.commit(_write(done, 2)[0].build())
    _write(open_, 2)
    assert full_disks.remove("app-1", 0) == 2
    assert full_disks.committed(key(partition=0)) is None
    with pytest.raises(UnknownShuffle):
        full_disks.read(key(partition=0), 0, 1)
    with pytest.raises(Unavailable):
        open_.write([b"x"])
    assert objects.size(overflowed_keys(key(partition=1))[0]) is None


def test_the_offload_reports_an_overflowed_copy_without_uploading_it(
    full_disks: OverflowStore, objects: MemoryObjectStore
) -> None:
    k = key(partition=5)
    f = full_disks.create(k)
    builder, data = _write(f, 4)
    f.commit(builder.build())
    uploads: list[str] = []
    put = objects.put

    def counting_put(name: str, body: bytes) -> None:
        uploads.append(name)
        put(name, body)

    objects.put = counting_put  # type: ignore[method-assign,assignment]
    offloader = Offloader(objects, full_disks, threads=1, already=full_disks.offloaded)
    try:
        copy = offloader.upload(k)
    finally:
        offloader.close()
    assert (copy.size, copy.digest) == (len(data), blake3.blake3(data).hexdigest())
    assert copy.data_key == overflowed_keys(k)[0] and not uploads


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=12), st.integers(0, 30_000))
def test_whatever_the_room_every_write_reads_back_and_only_what_did_not_fit_moved(
    sizes: list[int], room: int
) -> None:
    """Property: a location's committed bytes are exactly its writes, whether the disk took
    them all or ran out of room on the way; it is in the object store iff it ran out."""
    objects = MemoryObjectStore()
    store = OverflowStore(_FillingStore(), objects)
    k = key()
    f = store.create(k)
    _FillingFile.room = room
    try:
        builder, data = IndexBuilder(10_000), b""
        for i, n in enumerate(sizes):
            data += append(f, builder, [batch(0, 0, i, bytes([i]) * n)])
    finally:
        _FillingFile.room = 1 << 62
    f.commit(builder.build())
    assert store.read(k, 0, len(data)) == data
    moved = len(data) > room
    assert (objects.size(overflowed_keys(k)[0]) is not None) is moved
    assert (store.inner.committed(k) is None) is moved
    assert store.stats()["moved"] == int(moved)
