"""One conformance suite for every PartitionStore backend (DESIGN §3: every port has an in-memory twin).

A ``Backend`` opens a store over some storage and reopens it over the same
storage (the same dirs, or the same ``MemoryBacking``), which is how a worker
restart looks to the store. Adding a backend means adding a branch to
``Backend.open`` and a name to ``BACKENDS``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.batch import iter_batches
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Conflict, NotCommitted, Unavailable, UnknownShuffle
from croupier.dataplane.overflow import OverflowStore
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.index import IndexBuilder
from croupier.storage.store import (
    ChunkIndex,
    CommittedFile,
    LocationKey,
    MemoryBacking,
    MemoryPartitionStore,
    PartitionFile,
    PartitionStore,
)
from croupier.transports.objstore import MemoryObjectStore
from tests.storage.helpers import append, batch, key, seal, whole

# "disk-nofsync": the worker default (WorkerConfig.commit_fsync=False); "overflow": the disks
# under the overflow to an object store (a worker with --object-store; issue 26), with room
BACKENDS = ["memory", "disk", "disk-nofsync", "overflow"]


class Backend:
    """Opens stores of one kind over one storage location, and closes them all at teardown."""

    def __init__(self, kind: str, root: Path, num_disks: int = 1) -> None:
        self.kind = kind
        self.dirs = [root / f"disk{i}" for i in range(num_disks)]
        self.backing = MemoryBacking()
        self.num_disks = num_disks
        self.opened: list[PartitionStore] = []

    def open(self) -> PartitionStore:
        store: PartitionStore
        if self.kind == "memory":
            store = MemoryPartitionStore(self.backing, num_disks=self.num_disks)
        elif self.kind in ("disk", "disk-nofsync"):
            # A small descriptor bound, so that every test also exercises eviction.
            store = DiskPartitionStore(self.dirs, max_open_files=8, fsync=self.kind == "disk")
        elif self.kind == "overflow":
            disks = DiskPartitionStore(self.dirs, max_open_files=8, fsync=False, reserve=0)
            store = OverflowStore(disks, MemoryObjectStore())
        else:  # pragma: no cover
            raise AssertionError(self.kind)
        self.opened.append(store)
        return store

    def reopen(self, store: PartitionStore) -> PartitionStore:
        """Simulate a worker restart on the same storage."""
        store.close()
        return self.open()

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=BACKENDS, scope="module")
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def backend(kind: str, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(kind, tmp_path)
    yield b
    b.close_all()


@pytest.fixture
def store(backend: Backend) -> PartitionStore:
    return backend.open()


def commit_batches(store: PartitionStore, k: LocationKey, n: int = 3, size: int = 100) -> bytes:
    """Create ``k``, write ``n`` batches and a seal, commit; return the file's bytes."""
    f = store.create(k)
    builder = IndexBuilder(chunk_size=2 * size)
    data = append(f, builder, [batch(1, 0, i, bytes([i % 256]) * size) for i in range(n)])
    data += append(f, builder, [seal(1, 0, n)])
    f.commit(builder.build())
    return data


def read_all(store: PartitionStore, k: LocationKey) -> bytes:
    done = store.committed(k)
    assert done is not None
    return b"".join(store.read(k, off, n) for off, n in done.index.chunks)


# -- the round trip ------------------------------------------------------------------------------


def test_implements_the_protocols(store: PartitionStore) -> None:
    assert isinstance(store, PartitionStore)
    assert store.num_disks == 1
    f = store.create(key())
    assert isinstance(f, PartitionFile)
    assert f.key == key()
    assert f.disk == 0
    assert f.size == 0


def test_write_commit_read_round_trip(store: PartitionStore) -> None:
    k = key(partition=5, epoch=1, role=CopyRole.REPLICA)
    f = store.create(k)
    builder = IndexBuilder(chunk_size=300)
    batches = [batch(m, 0, b, bytes([m, b]) * (20 + 30 * b)) for m in range(3) for b in range(3)]
    data = b""
    for i in range(0, len(batches), 2):  # several writes of a few batches each
        data += append(f, builder, batches[i : i + 2])
        assert f.size == len(data)
    data += append(f, builder, [seal(m, 0, 3) for m in range(3)])
    index = builder.build()
    assert index.size == len(data)
    assert index.batches == 9
    assert index.seals == ((0, 0, 3), (1, 0, 3), (2, 0, 3))
    assert len(index.chunks) > 1

    done = f.commit(index)
    assert done == CommittedFile(k, index)
    assert store.committed(k) == done
    assert store.read(k, 0, len(data)) == data
    # chunk by chunk, as a fetch does: each chunk is whole batches with good digests
    seen = []
    for off, n in index.chunks:
        chunk = store.read(k, off, n)
        for pos, header, body in iter_batches(chunk, base=off):
            assert data[pos + 36 : pos + 36 + header.length] == body
            seen.append((header.map_id, header.batch_id, header.is_seal))
    assert len(seen) == 12
    assert store.read(k, 7, 13) == data[7:20]
    assert store.read(k, len(data), 0) == b""


def test_write_takes_bytes_and_memoryviews_and_skips_empty_pieces(store: PartitionStore) -> None:
    f = store.create(key())
    f.write([])
    f.write([b"", memoryview(b"")])
    assert f.size == 0
    f.write([b"ab", memoryview(b"xcdx")[1:3], b"", bytearray(b"ef")])  # type: ignore[list-item]
    assert f.size == 6
    f.commit(whole(6))
    assert store.read(key(), 0, 6) == b"abcdef"


def test_an_empty_file_commits_with_no_chunks(store: PartitionStore) -> None:
    f = store.create(key())
    done = f.commit(IndexBuilder().build())
    assert done.index == ChunkIndex((), 0, (), 0)
    assert store.read(key(), 0, 0) == b""
    with pytest.raises(BadRequest):
        store.read(key(), 0, 1)


def test_committed_survives_a_reopen_without_scan(backend: Backend, store: PartitionStore) -> None:
    data = commit_batches(store, key(partition=3))
    again = backend.reopen(store)
    done = again.committed(key(partition=3))
    assert done is not None and done.index.size == len(data)
    assert read_all(again, key(partition=3)) == data


# -- errors ---------------------------------------------------------------------------------------


def test_read_before_commit_is_not_committed(store: PartitionStore) -> None:
    f = store.create(key())
    f.write([b"x" * 10])
    assert store.committed(key()) is None
    with pytest.raises(NotCommitted):
        store.read(key(), 0, 1)


def test_read_of_an_unknown_location(store: PartitionStore) -> None:
    commit_batches(store, key(partition=1))
    for k in (
        key(app="other"),
        key(partition=2),
        key(partition=1, epoch=1),
        key(partition=1, role=CopyRole.REPLICA),
    ):
        assert store.committed(k) is None
        with pytest.raises(UnknownShuffle):
            store.read(k, 0, 1)


@pytest.mark.parametrize(
    ("offset", "length"), [(0, 10_000), (-1, 1), (0, -1), (400, 100), (10_000, 0), (1.5, 1)]
)
def test_read_out_of_range_is_bad_request(store: PartitionStore, offset: int, length: int) -> None:
    data = commit_batches(store, key())
    assert len(data) < 10_000
    with pytest.raises(BadRequest):
        store.read(key(), offset, length)


def test_commit_checks_the_size_and_happens_once(store: PartitionStore) -> None:
    f = store.create(key())
    f.write([b"abc"])
    with pytest.raises(Conflict):
        f.commit(whole(2))
    f.commit(whole(3))  # the failed commit changed nothing
    with pytest.raises(Conflict):
        f.commit(whole(3))
    with pytest.raises(Unavailable):
        f.write([b"more"])
    assert store.read(key(), 0, 3) == b"abc"


def test_create_over_an_open_or_committed_location_conflicts(store: PartitionStore) -> None:
    f = store.create(key())
    with pytest.raises(Conflict):
        store.create(key())
    f.write([b"abc"])
    f.commit(whole(3))
    with pytest.raises(Conflict):
        store.create(key())
    assert store.read(key(), 0, 3) == b"abc"


def test_abort_removes_what_was_written(store: PartitionStore) -> None:
    f = store.create(key())
    f.write([b"abc"])
    f.abort()
    f.abort()  # idempotent
    assert store.committed(key()) is None
    with pytest.raises(UnknownShuffle):
        store.read(key(), 0, 1)
    with pytest.raises(Unavailable):
        f.write([b"x"])
    with pytest.raises(Conflict):
        f.commit(whole(3))
    g = store.create(key())  # the location is free again, and empty
    assert g.size == 0
    g.write([b"new"])
    g.commit(whole(3))
    assert store.read(key(), 0, 3) == b"new"
    g.abort()  # a no-op after commit
    assert store.read(key(), 0, 3) == b"new"


def test_remove_a_shuffle_or_an_app(store: PartitionStore) -> None:
    for shuffle in (0, 1):
        for p in range(3):
            commit_batches(store, key("a", shuffle, p))
    open_a1 = store.create(key("a", 1, 9))
    open_a1.write([b"pending"])
    store.create(key("a", 2, 0))  # open, never written
    commit_batches(store, key("b", 1, 0))

    assert store.remove("a", 1) == 4
    assert store.committed(key("a", 1, 0)) is None
    assert store.committed(key("a", 0, 0)) is not None
    with pytest.raises(Unavailable):
        open_a1.write([b"more"])
    assert store.remove("a", 1) == 0
    assert store.remove("nobody") == 0

    assert store.remove("a") == 4  # shuffle 0's three files and the open one of shuffle 2
    assert store.scan() == [store.committed(key("b", 1, 0))]
    assert store.read(key("b", 1, 0), 0, 10)

    store.create(key("a", 1, 9)).commit(whole(0))  # the app can come back
    assert store.committed(key("a", 1, 9)) is not None


@pytest.mark.parametrize(
    "bad",
    [
        key(app="../x"),
        key(app="a/b"),
        key(app=""),
        key(app=".."),
        key(app="x" * 129),
        key(shuffle=-1),
        key(partition=-1),
        key(epoch=-1),
        key(partition=2**31),
        key(partition=True),
        LocationKey("app", "1", 0, 0, CopyRole.PRIMARY),  # type: ignore[arg-type]
        key(role="leader"),
        key(role="Primary"),
    ],
)
def test_bad_keys_are_bad_requests(store: PartitionStore, bad: LocationKey) -> None:
    with pytest.raises(BadRequest):
        store.create(bad)
    with pytest.raises(BadRequest):
        store.read(bad, 0, 0)
    with pytest.raises(BadRequest):
        store.committed(bad)
    assert store.scan() == []


def test_remove_validates_its_arguments(store: PartitionStore) -> None:
    with pytest.raises(BadRequest):
        store.remove("../x")
    with pytest.raises(BadRequest):
        store.remove("a", -1)


def test_a_closed_store_is_unavailable(store: PartitionStore) -> None:
    f = store.create(key(partition=1))
    f.write([b"abc"])
    commit_batches(store, key(partition=2))
    store.close()
    store.close()  # idempotent
    with pytest.raises(Unavailable):
        store.create(key(partition=3))
    with pytest.raises(Unavailable):
        store.read(key(partition=2), 0, 1)
    with pytest.raises(Unavailable):
        f.write([b"x"])
    with pytest.raises(Unavailable):
        f.commit(whole(3))


# -- restarts -------------------------------------------------------------------------------------


def test_scan_after_reopen_finds_exactly_the_committed_files(backend: Backend, store: PartitionStore) -> None:
    written = {}
    for p in range(4):
        written[key(partition=p)] = commit_batches(store, key(partition=p), n=p)
    written[key("b", 7, 0, 2, CopyRole.REPLICA)] = commit_batches(store, key("b", 7, 0, 2, CopyRole.REPLICA))
    pending = store.create(key(partition=10))
    pending.write([b"lost in the crash"])
    store.create(key(partition=11))
    aborted = store.create(key(partition=12))
    aborted.write([b"x"])
    aborted.abort()

    again = backend.reopen(store)
    found = again.scan()
    assert [c.key for c in found] == sorted(written)
    for c in found:
        assert read_all(again, c.key) == written[c.key]
    for p in (10, 11, 12):
        assert again.committed(key(partition=p)) is None
        with pytest.raises(UnknownShuffle):
            again.read(key(partition=p), 0, 0)

    # the location left open by the crash starts from scratch
    g = again.create(key(partition=10))
    assert g.size == 0
    g.write([b"fresh"])
    g.commit(whole(5))
    assert again.read(key(partition=10), 0, 5) == b"fresh"
    assert len(backend.reopen(again).scan()) == len(written) + 1


def test_many_locations(backend: Backend, store: PartitionStore) -> None:
    keys = [
        key(f"app-{a}", s, p, 0, role)
        for a in range(2)
        for s in range(3)
        for p in range(40)
        for role in (CopyRole.PRIMARY, CopyRole.REPLICA)
    ]
    files = [store.create(k) for k in keys]
    builders = [IndexBuilder(chunk_size=100) for _ in keys]
    expected = [b""] * len(keys)
    for rnd in range(3):  # round-robin, as flushers interleave locations
        for i, f in enumerate(files):
            expected[i] += append(f, builders[i], [batch(i, 0, rnd, b"%d:%d" % (i, rnd) * 5)])
    for f, b in zip(files, builders, strict=True):
        f.commit(b.build())
    again = backend.reopen(store)
    found = again.scan()
    assert [c.key for c in found] == sorted(keys)
    for k, data in zip(keys, expected, strict=True):
        assert read_all(again, k) == data
    # a scan of one app, or one shuffle, finds exactly its files, with or without a full scan before
    whole = again.scan("app-0", 1)
    for _ in range(2):
        assert [c.key for c in again.scan("app-1")] == sorted(k for k in keys if k.app_id == "app-1")
        assert [c.key for c in again.scan("app-0", 2)] == sorted(
            k for k in keys if k.app_id == "app-0" and k.shuffle_id == 2
        )
        assert again.scan("app-0", 7) == [] and again.scan("nobody") == []
        assert again.scan("app-0", 1) == whole
        again = backend.reopen(again)
    assert again.remove("app-0") == len(keys) // 2
    assert again.scan("app-0") == []


@pytest.mark.parametrize("scope", [("../x", None), ("a", -1), (None, 1), ("", None)])
def test_a_scan_validates_its_scope(store: PartitionStore, scope: tuple[str | None, int | None]) -> None:
    with pytest.raises(BadRequest):
        store.scan(*scope)


def test_locations_spread_over_disks(kind: str, tmp_path: Path) -> None:
    b = Backend(kind, tmp_path, num_disks=3)
    try:
        store = b.open()
        assert store.num_disks == 3
        disks = [store.create(key(partition=p)).disk for p in range(60)]
        assert set(disks) == {0, 1, 2}
        # the choice is stable: the same key goes to the same disk in another store
        other = Backend(kind, tmp_path / "other", num_disks=3).open()
        try:
            assert [other.create(key(partition=p)).disk for p in range(60)] == disks
        finally:
            other.close()
    finally:
        b.close_all()


# -- the property: whatever was written reads back --------------------------------------------------

_writes = st.lists(st.lists(st.binary(max_size=300), max_size=6), max_size=8)
_ranges = st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=10)


@settings(max_examples=60, deadline=None, database=None)
@given(writes=_writes, ranges=_ranges, reopen=st.booleans())
def test_reads_equal_the_concatenated_writes(
    kind: str, writes: list[list[bytes]], ranges: list[tuple[float, float]], reopen: bool
) -> None:
    with tempfile.TemporaryDirectory() as d:
        b = Backend(kind, Path(d))
        try:
            store = b.open()
            f = store.create(key())
            for pieces in writes:
                f.write([memoryview(p) if i % 2 else p for i, p in enumerate(pieces)])
            data = b"".join(b"".join(p) for p in writes)
            assert f.size == len(data)
            f.commit(whole(len(data)))
            if reopen:
                store = b.reopen(store)
            for a, z in ranges:
                offset = int(a * len(data))
                length = int(z * (len(data) - offset))
                assert store.read(key(), offset, length) == data[offset : offset + length]
        finally:
            b.close_all()
