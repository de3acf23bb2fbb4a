"""``O_DIRECT`` partition files (``DiskPartitionStore(direct=True)``, issue 25): the same
files and reads as a buffered store, whatever the sizes of the writes."""

from __future__ import annotations

import mmap
import os
import random
import threading
from pathlib import Path

import pytest

from croupier.storage import _direct
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.store import ChunkIndex, LocationKey

KEY = LocationKey("app-1", 0, 3, 0, "primary")


def _store(tmp_path: Path, direct: bool) -> DiskPartitionStore:
    store = DiskPartitionStore([tmp_path / ("d" if direct else "b")], fsync=False, direct=direct)
    if direct and not store.direct:
        pytest.skip("this filesystem refuses O_DIRECT")
    return store


def _index(size: int) -> ChunkIndex:
    index = ChunkIndex()
    object.__setattr__(index, "size", size)  # only its size is checked by the store
    return index


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_direct_files_equal_buffered_ones(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_direct, "STAGE", 3 * _direct.ALIGN)  # writes wider than the stage too
    monkeypatch.setattr(_direct, "_local", threading.local())  # a stage of that size
    rng = random.Random(seed)
    calls = [[os.urandom(rng.choice([0, 1, 7, 4095, 4096, 4097, 20_000])) for _ in range(rng.randint(1, 4))]]
    calls += [[os.urandom(rng.randint(0, 9000))] for _ in range(rng.randint(0, 6))]
    expected = b"".join(b"".join(c) for c in calls)
    files = []
    for direct in (True, False):
        store = _store(tmp_path, direct)
        f = store.create(KEY)
        for pieces in calls:
            f.write([memoryview(p) for p in pieces])
        assert f.size == len(expected)
        f.commit(_index(len(expected)))
        files.append(f.data_path.read_bytes())
        n = len(expected)
        for at, want in [(0, n), (1, n - 2), (n // 3, 5000)]:
            offset = min(at, n)
            length = max(0, min(want, n - offset))
            assert store.read(KEY, offset, length) == expected[offset : offset + length]
        store.close()
    assert files[0] == files[1] == expected


def test_a_failed_direct_write_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path, True)
    f = store.create(KEY)
    first = os.urandom(5000)
    f.write([first])  # its last block padded
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, views: (_ for _ in ()).throw(OSError(5, "EIO")))
    monkeypatch.setattr(store._health, "choose", lambda *a, **k: None)  # no other dir to move to
    with pytest.raises(Exception, match="EIO"):
        f.write([os.urandom(10_000)])
    monkeypatch.setattr(os, "writev", real)
    assert f.data_path.read_bytes() == first  # cut back to what was written before
    f.write([b"x" * 10])
    f.commit(_index(5010))
    assert f.data_path.read_bytes() == first + b"x" * 10
    store.close()


# -- reads lent to replies (lend_direct, FETCH_CHUNK) ---------------------------------------------
def _committed(tmp_path: Path, data: bytes) -> DiskPartitionStore:
    store = _store(tmp_path, True)
    f = store.create(KEY)
    f.write([data])
    f.commit(_index(len(data)))
    return store


def test_a_lent_read_is_a_view_of_a_pooled_buffer_reused_once_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _direct.LendPool(4 * 1024 * 1024)
    monkeypatch.setattr(_direct, "LEND_POOL", pool)
    monkeypatch.setattr(_direct.lend_direct, "__defaults__", (pool,))
    data = os.urandom(3 * 1024 * 1024 + 123)
    store = _committed(tmp_path, data)
    view = store.read_view(KEY, 5, 1024 * 1024)
    assert isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap)  # no copy out
    assert view == data[5 : 5 + 1024 * 1024]
    first = id(view.obj)
    part = view[10:20]  # a slice of it holds the buffer too
    del view
    other = store.read_view(KEY, 2 * 1024 * 1024, 1024 * 1024)
    assert isinstance(other, memoryview) and id(other.obj) != first  # still referred to
    assert other == data[2 * 1024 * 1024 : 3 * 1024 * 1024]
    assert part == data[15:25]
    second = id(other.obj)
    kept = pool.kept
    del part, other
    again = store.read_view(KEY, 0, 100_000)
    assert isinstance(again, memoryview) and id(again.obj) in (first, second) and again == data[:100_000]
    assert pool.kept == kept and pool.lent == 3 and pool.copied == 0  # no new buffer
    assert store.read_view(KEY, 0, 1000) == data[:1000]  # a small read is copied
    del again
    store.close()


def test_a_slow_reader_does_not_grow_the_pool_past_its_capacity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _direct.LendPool(2 * 1024 * 1024)
    monkeypatch.setattr(_direct.lend_direct, "__defaults__", (pool,))
    data = os.urandom(4 * 1024 * 1024)
    store = _committed(tmp_path, data)
    held = [store.read_view(KEY, i * 512 * 1024, 512 * 1024) for i in range(8)]  # never dropped
    assert pool.kept <= 2 * 1024 * 1024
    assert pool.copied >= 4 and sum(isinstance(h, bytes) for h in held) == pool.copied
    assert b"".join(held) == data  # every read right, lent or copied
    held.clear()
    assert isinstance(store.read_view(KEY, 0, 1024 * 1024), memoryview)  # free again: lent
    store.close()


def test_a_failed_lent_read_frees_its_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _direct.LendPool(1024 * 1024)
    monkeypatch.setattr(_direct.lend_direct, "__defaults__", (pool,))
    store = _committed(tmp_path, os.urandom(600_000))
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(Exception, match="EIO"):
        store.read_view(KEY, 0, 500_000)
    monkeypatch.setattr(os, "preadv", real)
    view = store.read_view(KEY, 0, 500_000)
    assert isinstance(view, memoryview) and pool.kept == 512 * 1024  # the same buffer, lent again
    store.close()


def test_a_buffered_store_reads_views_as_bytes(tmp_path: Path) -> None:
    store = _store(tmp_path, False)
    f = store.create(KEY)
    f.write([b"abc" * 100_000])
    f.commit(_index(300_000))
    assert store.read_view(KEY, 3, 6) == b"abcabc"
    store.close()
