"""``O_DIRECT`` partition files (``DiskPartitionStore(direct=True)``, issue 25): the same
files and reads as a buffered store, whatever the sizes of the writes."""

from __future__ import annotations

import fcntl
import mmap
import os
import random
import threading
from pathlib import Path

import pytest

from croupier.storage import _direct, disk
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


@pytest.mark.parametrize("small_file", [0, _direct.SMALL_FILE])  # direct only; small ones buffered
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_direct_files_equal_buffered_ones(
    tmp_path: Path, seed: int, small_file: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk, "SMALL_FILE", small_file)
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
    monkeypatch.setattr(disk, "SMALL_FILE", 0)
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


# -- small files through the page cache (SMALL_FILE) ----------------------------------------------
def _count(monkeypatch: pytest.MonkeyPatch, *names: str) -> dict[str, int]:
    calls = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(os, name)

        def counted(*args: object, _name: str = name, _real: object = real) -> object:
            calls[_name] += 1
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(os, name, counted)
    return calls


def test_a_small_location_is_committed_and_read_back_without_a_device_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, True)
    data = os.urandom(10_000)  # a partition of a 6,400-partition shuffle: a few KiB per copy
    calls = _count(monkeypatch, "ftruncate", "preadv", "pwrite")
    f = store.create(KEY)
    f.write([data[:3000]])
    f.write([memoryview(data)[3000:]])
    f.commit(_index(len(data)))
    assert store.read(KEY, 0, len(data)) == data  # what the memory tier does at commit
    assert store.read_view(KEY, 4000, 10) == data[4000:4010]
    # no padded block written, none cut off (read back) at commit, and no O_DIRECT read
    assert calls == {"ftruncate": 0, "preadv": 0, "pwrite": 2}
    assert f.data_path.read_bytes() == data
    store.close()


def test_a_small_file_that_grows_goes_on_with_direct_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, True)
    first, big, last = os.urandom(5000), os.urandom(3 * _direct.SMALL_FILE + 1), os.urandom(7)
    f = store.create(KEY)
    f.write([first])
    calls = _count(monkeypatch, "ftruncate", "pwrite")
    f.write([big])  # from the small file's last partial block on, padded
    f.write([last])  # still direct: the file may end past its size now
    f.commit(_index(len(first) + len(big) + len(last)))
    assert calls == {"ftruncate": 1, "pwrite": 0}
    assert f.data_path.read_bytes() == first + big + last
    assert store.read(KEY, 4000, 2000) == (first + big)[4000:6000]
    store.close()


def test_a_failed_small_write_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path, True)
    f = store.create(KEY)
    first = os.urandom(5000)
    f.write([first])
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO")))
    monkeypatch.setattr(store._health, "choose", lambda *a, **k: None)  # no other dir to move to
    with pytest.raises(Exception, match="EIO"):
        f.write([os.urandom(1000)])
    monkeypatch.setattr(os, "pwrite", real)
    assert f.data_path.read_bytes() == first
    f.write([b"x" * 10])  # the descriptor is O_DIRECT again, and small writes still work
    f.commit(_index(5010))
    assert f.data_path.read_bytes() == first + b"x" * 10
    store.close()


def test_a_descriptor_that_keeps_o_direct_writes_small_files_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, True)
    real = fcntl.fcntl

    def refuse(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETFL:
            raise OSError(22, "EINVAL")
        return int(real(fd, cmd, arg))

    monkeypatch.setattr(fcntl, "fcntl", refuse)
    failed: list[OSError] = []
    monkeypatch.setattr(store._health, "write_failed", lambda disk, exc: failed.append(exc))
    f = store.create(KEY)
    f.write([b"small" * 100])
    f.commit(_index(500))
    assert f.data_path.read_bytes() == b"small" * 100  # written padded, cut at commit
    assert failed == []  # not a failed write: the disk stays healthy
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
