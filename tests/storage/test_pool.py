"""The store's pool of emptied files (storage/_pool.py): a removed shuffle's ``.data`` files
are emptied and reused by the next locations, never with a byte of their old data; a full
pool, a failed step or a crash between two steps only costs a create."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from croupier.core import ids
from croupier.core.errors import BadRequest
from croupier.storage._pool import POOL_DIR, FilePool
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.index import IndexBuilder
from tests.storage.helpers import append, batch, key, seal


def commit(store: DiskPartitionStore, partition: int, data: bytes, shuffle: int = 0) -> int:
    """Commit a location holding ``data``; its file's inode."""
    f = store.create(key(shuffle=shuffle, partition=partition))
    builder = IndexBuilder(chunk_size=64)
    append(f, builder, [batch(0, 0, 0, data), seal(0, 0, 1)])
    f.commit(builder.build())
    return os.stat(f.data_path).st_ino


def test_a_removed_shuffles_files_are_emptied_and_reused_by_the_next_locations(tmp_path: Path) -> None:
    with DiskPartitionStore([tmp_path / "d0"], direct=True) as store:
        old = {commit(store, p, b"secret-%d" % p * 5000) for p in range(4)}
        assert store.remove("app-1", 0) == 4
        pool = tmp_path / "d0" / POOL_DIR
        assert sorted(os.stat(p).st_ino for p in pool.iterdir()) == sorted(old)
        assert all(p.stat().st_size == 0 for p in pool.iterdir())
        new = {commit(store, p, b"new-%d" % p, shuffle=1) for p in range(6)}
        assert old < new  # four reused, two created
        assert not list(pool.iterdir())
        for p in range(6):
            k = key(shuffle=1, partition=p)
            raw = store.read(k, 0, store.committed(k).index.size)  # type: ignore[union-attr]
            assert b"secret" not in raw and (b"new-%d" % p) in raw


def test_a_full_pool_deletes_the_rest(tmp_path: Path) -> None:
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        store._pool.limit = 2
        for p in range(5):
            commit(store, p, b"x")
        assert store.remove("app-1") == 5
        assert len(list((tmp_path / "d0" / POOL_DIR).iterdir())) == 2
        assert not (tmp_path / "d0" / "app-1").exists()


def test_a_pool_survives_a_restart_and_a_file_left_full_by_a_crash_is_emptied(tmp_path: Path) -> None:
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        commit(store, 0, b"x")
        store.remove("app-1")
    pool = tmp_path / "d0" / POOL_DIR
    # a crash between a file's move into the pool and its truncate (or a file left by hand)
    (pool / "7").write_bytes(b"left over")
    (pool / "notes.txt").write_text("not ours")
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        assert len(store._pool) == 2
        f = store.create(key(partition=3))
        assert f.data_path.stat().st_size == 0  # the highest name first: "7", emptied
        assert sorted(p.name for p in pool.iterdir()) == ["0", "notes.txt"]
        assert store._pool._next == [8]


def test_a_step_that_fails_costs_a_create_not_a_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        commit(store, 0, b"x")
        store.remove("app-1")
        real = os.rename

        def failing(src: object, dst: object) -> None:
            raise OSError(5, "EIO")

        monkeypatch.setattr(os, "rename", failing)
        assert commit(store, 1, b"y") > 0  # created: the pooled file could not move
        assert store.remove("app-1") == 1  # and deleted: it could not move into the pool either
        monkeypatch.setattr(os, "rename", real)
        assert not (tmp_path / "d0" / "app-1").exists()


def test_the_pool_dir_is_never_an_app_dir(tmp_path: Path) -> None:
    with pytest.raises(BadRequest):
        ids.app_id(POOL_DIR)
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        commit(store, 0, b"x")
        store.remove("app-1")
        commit(store, 1, b"y", shuffle=2)
        commit(store, 2, b"z", shuffle=2)
        store.remove("app-1", 2)
        commit(store, 0, b"w", shuffle=3)
        assert [c.key for c in store.scan()] == [key(shuffle=3, partition=0)]


def test_put_and_take_at_their_edges(tmp_path: Path) -> None:
    pool = FilePool((tmp_path / "d0",))
    (tmp_path / "d0").mkdir()
    shm = Path("/dev/shm")
    if shm.is_dir() and os.stat(shm).st_dev != os.stat(tmp_path).st_dev:
        other = shm / f"croupier-pool-test-{os.getpid()}.data"
        other.write_bytes(b"abc")
        try:
            assert not pool.put(0, other)  # another filesystem: no move (EXDEV), the caller deletes it
        finally:
            other.unlink()
    here = tmp_path / "here.data"
    here.write_bytes(b"abc")
    assert pool.put(0, here)  # the pool dir is made at the first put
    assert len(pool) == 1 and not here.exists()
    assert not pool.put(0, tmp_path / "missing.data")
    target = tmp_path / "d0" / "t.data"
    assert pool.take(0, target) and target.stat().st_size == 0
    assert not pool.take(0, tmp_path / "d0" / "u.data")
