"""Issue 15: a write that fails for space (or an I/O error) moves the file to another healthy
dir; with no dir left it raises, the file intact; failed dirs are reported and avoided."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core.errors import Unavailable
from croupier.storage.disk import DiskPartitionStore, default_reserve
from croupier.storage.index import index_of
from croupier.storage.store import LocationKey, disk_for
from tests.storage.helpers import batch


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


@pytest.fixture
def small_dir(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    path = tmp_path / "small"
    try:
        _mount_tmpfs(path, "1m")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def _key(partition: int) -> LocationKey:
    return LocationKey("app", 1, partition, 0, "primary")


def _on_disk(store: DiskPartitionStore, want: int) -> LocationKey:
    return next(k for k in map(_key, range(100)) if store._health.choose(k, set()) == want)


def _batches(n: int, size: int) -> bytes:
    out = b""
    for i in range(n):
        out += batch(0, 0, i, bytes([i % 251]) * size)[1]
    return out


def test_a_full_dir_moves_the_file_and_keeps_its_bytes(small_dir: Path, tmp_path: Path) -> None:
    store = DiskPartitionStore([small_dir, tmp_path / "big"], fsync=False, reserve=0)
    try:
        key = _on_disk(store, 0)
        f = store.create(key)
        assert f.disk == 0
        data = _batches(8, 256 * 1024)  # 2 MiB: the tmpfs takes less than half
        step = len(data) // 8
        for i in range(8):
            f.write([data[i * step : (i + 1) * step]])
        assert len(data) == 8 * step
        assert f.disk == 1 and f.size == len(data)
        f.commit(index_of(data))
        assert store.read(key, 0, len(data)) == data
        assert not list(small_dir.rglob("*.data"))
        states = store.dir_states()
        assert [s.healthy for s in states] == [True, True]
    finally:
        store.close()


def test_no_dir_left_raises_and_keeps_the_written_prefix(small_dir: Path) -> None:
    store = DiskPartitionStore([small_dir], fsync=False, reserve=0)
    try:
        f = store.create(_key(0))
        piece = b"x" * (256 * 1024)
        written = 0
        with pytest.raises(Unavailable) as err:
            for _ in range(8):
                f.write([piece])
                written += len(piece)
        assert err.value.details.get("no_space") is True
        assert f.size == written and (small_dir / "app" / "1" / "0-0-primary.data").stat().st_size == written
    finally:
        store.close()


def test_a_dir_whose_write_fails_is_unhealthy_and_avoided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskPartitionStore([tmp_path / "a", tmp_path / "b"], fsync=False, reserve=0)
    try:
        key = _on_disk(store, 0)
        f = store.create(key)
        real = os.writev
        calls = {"n": 0}

        def failing(fd: int, views: list[bytes]) -> int:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError(errno.EIO, "injected")
            return real(fd, views)

        monkeypatch.setattr(os, "writev", failing)
        f.write([b"abc"])
        assert f.disk == 1 and f.size == 3
        assert [s.healthy for s in store.dir_states()] == [False, True]
        assert store.create(_on_disk_any(store, 0)).disk == 1  # new locations avoid the dir
    finally:
        store.close()


def _on_disk_any(store: DiskPartitionStore, hashed: int) -> LocationKey:
    return next(
        k for k in map(_key, range(100)) if disk_for(k, store.num_disks) == hashed and k not in store._open
    )


def test_the_default_reserve_is_the_smaller_of_5_gib_and_a_tenth() -> None:
    assert default_reserve(40 * 1024**2) == 4 * 1024**2
    assert default_reserve(1024**4) == 5 * 1024**3
