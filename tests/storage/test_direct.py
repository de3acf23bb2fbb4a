"""``O_DIRECT`` partition files (``DiskPartitionStore(direct=True)``, issue 25): the same
files and reads as a buffered store, whatever the sizes of the writes."""

from __future__ import annotations

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
