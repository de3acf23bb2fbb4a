"""DiskPartitionStore only: the layout on disk, the index file, damage, ids before paths, descriptors."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Unavailable, UnknownShuffle
from croupier.storage import _fds
from croupier.storage._pool import POOL_DIR
from croupier.storage.disk import DiskPartitionStore, decode_index, encode_index
from croupier.storage.index import IndexBuilder
from croupier.storage.store import ChunkIndex, LocationKey
from tests.storage.helpers import append, batch, key, seal, whole


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DiskPartitionStore]:
    s = DiskPartitionStore([tmp_path / "d0"])
    yield s
    s.close()


def tree(root: Path) -> list[str]:
    """The store's files and dirs under ``root``, but its pool of emptied files (``pooled``)."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.relative_to(root).parts[0] != POOL_DIR
    )


def pooled(root: Path) -> list[int]:
    """The sizes of the emptied files waiting in ``root``'s pool (storage/_pool.py)."""
    return [p.stat().st_size for p in sorted((root / POOL_DIR).glob("*"))]


def commit(store: DiskPartitionStore, k: LocationKey, data: bytes = b"") -> bytes:
    f = store.create(k)
    builder = IndexBuilder(chunk_size=64)
    raw = append(f, builder, [batch(0, 0, 0, data), seal(0, 0, 1)])
    f.commit(builder.build())
    return raw


def fds_under(root: Path) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(root)):
                n += 1
        except OSError:
            continue
    return n


# -- layout ---------------------------------------------------------------------------------------


def test_exact_paths_on_disk(tmp_path: Path, store: DiskPartitionStore) -> None:
    k = key("etl.nightly_1", 3, 7, 2, CopyRole.REPLICA)
    f = store.create(k)
    assert tree(tmp_path / "d0") == ["etl.nightly_1", "etl.nightly_1/3"]  # opened late: no file yet
    assert f.data_path == tmp_path / "d0/etl.nightly_1/3/7-2-replica.data"
    f.write([b"abc"])
    assert (tmp_path / "d0/etl.nightly_1/3/7-2-replica.data").read_bytes() == b"abc"
    f.commit(whole(3))
    assert tree(tmp_path / "d0") == [
        "etl.nightly_1",
        "etl.nightly_1/3",
        "etl.nightly_1/3/7-2-replica.data",
        "etl.nightly_1/3/index.log",
    ]
    assert store.open_files == 1  # commit closed the writer; the dir's index log stays in the LRU


def test_the_index_file(tmp_path: Path, store: DiskPartitionStore) -> None:
    k = key("app", 1, 2, 3)
    raw = commit(store, k, b"x" * 100)
    text = (tmp_path / "d0/app/1/index.log").read_bytes()  # the record is the log's one line
    assert text.endswith(b"\n") and b" " not in text and text.count(b"\n") == 1
    doc = json.loads(text)
    assert doc == {
        "version": 1,
        "key": {"app_id": "app", "shuffle_id": 1, "partition": 2, "epoch": 3, "role": "primary"},
        "index": {"chunks": [[0, 136], [136, 36]], "batches": 1, "seals": [[0, 0, 1]], "size": len(raw)},
        "crc": doc["crc"],
    }
    rest = {k: v for k, v in doc.items() if k != "crc"}
    assert doc["crc"] == zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())
    assert text == encode_index(k, ChunkIndex.from_json(doc["index"]))
    assert decode_index(text, k) == ChunkIndex.from_json(doc["index"])


def _damage(text: bytes) -> list[bytes]:
    doc = json.loads(text)
    other_key = {**doc, "key": {**doc["key"], "partition": 9}}
    rest = {k: v for k, v in other_key.items() if k != "crc"}
    other_key["crc"] = zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())
    v2 = {**doc, "version": 2}
    return [
        b"",
        text[: len(text) // 2],
        text.replace(b'"batches":1', b'"batches":2'),  # checksum no longer matches
        json.dumps({**doc, "crc": doc["crc"] ^ 1}).encode(),
        json.dumps(v2).encode(),
        json.dumps(other_key).encode(),  # a valid index of another location
        b"\xff\xfe",
        b"[]",
    ]


@pytest.mark.parametrize("case", range(8))
def test_a_damaged_index_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, store: DiskPartitionStore, case: int
) -> None:
    # an older version's layout: one ``.index`` file per location, still read
    for partition, data in ((1, b"good"), (2, b"bad")):
        commit(store, key(partition=partition), data)
    log_path = tmp_path / "d0/app-1/0/index.log"
    for partition, line in zip((1, 2), log_path.read_bytes().splitlines(keepends=True), strict=True):
        (tmp_path / f"d0/app-1/0/{partition}-0-primary.index").write_bytes(line)
    log_path.unlink()
    path = tmp_path / "d0/app-1/0/2-0-primary.index"
    damaged = _damage(path.read_bytes())[case]
    with pytest.raises(ValueError, match=r".+"):
        decode_index(damaged, key(partition=2))
    store.close()
    path.write_bytes(damaged)

    with DiskPartitionStore([tmp_path / "d0"]) as again, caplog.at_level(logging.WARNING):
        assert [c.key for c in again.scan()] == [key(partition=1)]
        assert "2-0-primary.index" in caplog.text
        assert again.committed(key(partition=2)) is None
        with pytest.raises(UnknownShuffle):
            again.read(key(partition=2), 0, 0)
        # not committed, so it can be written again
        f = again.create(key(partition=2))
        f.write([b"again"])
        f.commit(whole(5))
        assert again.read(key(partition=2), 0, 5) == b"again"


@pytest.mark.parametrize("change", ["longer", "shorter", "missing"])
def test_data_of_the_wrong_size_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, store: DiskPartitionStore, change: str
) -> None:
    commit(store, key(partition=1), b"good")
    commit(store, key(partition=2), b"bad")
    store.close()
    data = tmp_path / "d0/app-1/0/2-0-primary.data"
    if change == "longer":
        with data.open("ab") as fh:
            fh.write(b"!")
    elif change == "shorter":
        os.truncate(data, data.stat().st_size - 1)
    else:
        data.unlink()
    with DiskPartitionStore([tmp_path / "d0"]) as again, caplog.at_level(logging.WARNING):
        assert [c.key for c in again.scan()] == [key(partition=1)]
        assert "2-0-primary" in caplog.text
        with pytest.raises(UnknownShuffle):
            again.read(key(partition=2), 0, 0)


def test_scan_ignores_foreign_names_and_leftovers(tmp_path: Path, store: DiskPartitionStore) -> None:
    commit(store, key(partition=1), b"x")
    root = tmp_path / "d0"
    (root / "lost+found").mkdir()
    (root / "app-1/0/notes.txt").write_text("hi")
    (root / "app-1/0/01-0-primary.index").write_text("{}")  # a leading zero is not our name
    (root / "app-1/0/3-0-primary.index.tmp").write_text("{")  # an unfinished commit
    (root / "app-1/0/4-0-primary.data").write_bytes(b"uncommitted")
    (root / "app-1/x").mkdir()
    (root / "app-1/007").mkdir()
    assert [c.key for c in store.scan()] == [key(partition=1)]
    # remove counts every location with a file, and deletes every file but the ``.data``
    # ones, which it empties and keeps for later locations
    assert store.remove("app-1") == 3
    assert tree(root) == ["lost+found"]
    assert pooled(root) == [0, 0]


# -- ids are checked before they touch a path ------------------------------------------------------


@pytest.mark.parametrize("app", ["../evil", "..", "a/../../evil", "/abs", "x\x00y", "a\\b"])
def test_ids_are_validated_before_paths(tmp_path: Path, store: DiskPartitionStore, app: str) -> None:
    before = tree(tmp_path)
    for call in (
        lambda: store.create(LocationKey(app, 0, 0, 0, "primary")),
        lambda: store.read(LocationKey(app, 0, 0, 0, "primary"), 0, 0),
        lambda: store.committed(LocationKey(app, 0, 0, 0, "primary")),
        lambda: store.remove(app),
        lambda: store.location_dir(0, LocationKey(app, 0, 0, 0, "primary")),
    ):
        with pytest.raises(BadRequest):
            call()
    assert tree(tmp_path) == before


# -- several dirs ---------------------------------------------------------------------------------


def test_several_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    keys = [key(partition=p) for p in range(30)]
    with DiskPartitionStore(dirs) as store:
        assert store.num_disks == 3
        for k in keys:
            f = store.create(k)
            f.write([k.name.encode()])
            f.commit(whole(len(k.name)))
            assert (dirs[f.disk] / "app-1/0" / f"{k.name}.data").exists()
        per_dir = [len(list(d.rglob("*.data"))) for d in dirs]
        assert sum(per_dir) == 30 and min(per_dir) > 0
    # another order of the same dirs (or a new dir) still finds every file
    with DiskPartitionStore([dirs[2], tmp_path / "new", dirs[0], dirs[1]]) as store:
        for k in keys:
            assert store.read(k, 0, len(k.name)) == k.name.encode()
            with pytest.raises(Exception, match="committed"):
                store.create(k)
    with DiskPartitionStore(list(reversed(dirs))) as store:
        assert [c.key for c in store.scan()] == sorted(keys)
        assert store.remove("app-1", 0) == 30
        assert all(tree(d) == [] for d in dirs)


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        DiskPartitionStore([])
    with pytest.raises(ValueError, match="twice"):
        DiskPartitionStore([tmp_path / "a", tmp_path / "a/"])
    with pytest.raises(ValueError, match="max_open_files"):
        DiskPartitionStore([tmp_path], max_open_files=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(Unavailable, match="file"):
        DiskPartitionStore([tmp_path / "file" / "sub"])


def test_remove_deletes_only_empty_directories(tmp_path: Path, store: DiskPartitionStore) -> None:
    commit(store, key("a", 1, 0))
    commit(store, key("a", 2, 0))
    commit(store, key("b", 1, 0))
    assert store.remove("a", 1) == 1
    assert tree(tmp_path / "d0") == [
        "a",
        "a/2",
        "a/2/0-0-primary.data",
        "a/2/index.log",
        *tree_of_b(),
    ]
    assert store.remove("a", 2) == 1
    assert tree(tmp_path / "d0") == tree_of_b()


def tree_of_b() -> list[str]:
    return ["b", "b/1", "b/1/0-0-primary.data", "b/1/index.log"]


def test_remove_after_a_restart_deletes_uncommitted_files(tmp_path: Path, store: DiskPartitionStore) -> None:
    commit(store, key(partition=0))
    store.create(key(partition=1)).write([b"crash"])
    store.close()
    with DiskPartitionStore([tmp_path / "d0"]) as again:
        assert again.remove("app-1", 0) == 2
    assert tree(tmp_path / "d0") == []


def test_a_location_in_a_dir_this_store_made_probes_for_no_leftovers(
    tmp_path: Path, store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: only a dir that was there before the store opened can hold files of an
    earlier life; in one the store made, a new location costs no unlink or stat for them."""
    store.create(key(partition=0))  # makes d0/app-1/0
    probes: list[str] = []
    real_unlink, real_exists = Path.unlink, Path.exists

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.is_relative_to(tmp_path):
            probes.append(f"unlink {self.name}")
        real_unlink(self, missing_ok=missing_ok)

    def exists(self: Path) -> bool:
        if self.is_relative_to(tmp_path):
            probes.append(f"exists {self.name}")
        return real_exists(self)

    monkeypatch.setattr(Path, "unlink", unlink)
    monkeypatch.setattr(Path, "exists", exists)
    for p in range(1, 50):
        store.create(key(partition=p))
    assert probes == []


def test_leftovers_in_a_dir_that_was_there_before_are_deleted_at_create(tmp_path: Path) -> None:
    old = tmp_path / "d0" / "app-1" / "0"
    old.mkdir(parents=True)
    (old / "0-0-primary.data").write_bytes(b"stale bytes of an earlier life")
    (old / "0-0-primary.index.tmp").write_bytes(b"half an index")
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        f = store.create(key(partition=0))
        assert tree(tmp_path / "d0") == ["app-1", "app-1/0"]
        builder = IndexBuilder(chunk_size=64)
        raw = append(f, builder, [batch(0, 0, 0, b"new"), seal(0, 0, 1)])
        done = f.commit(builder.build())
        assert store.read(key(partition=0), 0, done.index.size) == raw  # no stale byte before it


def test_after_a_remove_the_shuffle_s_dir_is_probed_again(tmp_path: Path, store: DiskPartitionStore) -> None:
    """What the store knew of a removed shuffle's dir is void: a file planted there since
    (by anything but the store) is deleted at the next create, never appended to."""
    commit(store, key(partition=0), b"first life")
    assert store.remove("app-1", 0) == 1
    planted = tmp_path / "d0" / "app-1" / "0"
    planted.mkdir(parents=True)
    (planted / "0-0-primary.data").write_bytes(b"planted")
    f = store.create(key(partition=0))
    f.write([b"x" * 10])
    assert (planted / "0-0-primary.data").read_bytes() == b"x" * 10


# -- descriptors ----------------------------------------------------------------------------------


def test_descriptors_stay_bounded(tmp_path: Path) -> None:
    root = tmp_path / "d0"
    with DiskPartitionStore([root], max_open_files=4) as store:
        keys = [key(partition=p) for p in range(50)]
        files = [store.create(k) for k in keys]
        builders = [IndexBuilder(chunk_size=40) for _ in keys]
        expected = [b""] * 50
        for rnd in range(5):
            for i, f in enumerate(files):
                expected[i] += append(f, builders[i], [batch(i, 0, rnd, b"r%d" % rnd)])
                assert store.open_files <= 4
                assert fds_under(root) <= 4
        for f, b in zip(files, builders, strict=True):
            f.commit(b.build())
            assert fds_under(root) <= 4
        assert store.open_files == 1  # the dir's index log
        for rnd in range(2):  # readers share the bound
            for k, data in zip(keys, expected, strict=True):
                assert store.read(k, rnd, len(data) - rnd) == data[rnd:]
                assert store.open_files <= 4
                assert fds_under(root) <= 4
        assert store.open_files == 4
    assert fds_under(root) == 0


def test_running_out_of_descriptors_evicts_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "d0"
    real_open = os.open
    refused = []

    def scarce_open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        # The system allows only two descriptors under root, whatever the store's bound says.
        if str(path).startswith(str(root)) and fds_under(root) >= 2:
            refused.append(path)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode, **kw)

    with DiskPartitionStore([root], max_open_files=100) as store:
        files = [store.create(key(partition=p)) for p in range(6)]
        monkeypatch.setattr(os, "open", scarce_open)
        for rnd in range(3):
            for f in files:
                f.write([b"%d" % rnd])
        for f in files:
            f.commit(whole(3))
        monkeypatch.undo()
        assert refused
        assert [store.read(f.key, 0, 3) for f in files] == [b"012"] * 6


def test_concurrent_writers_and_readers_under_a_small_bound(tmp_path: Path) -> None:
    with DiskPartitionStore([tmp_path / "a", tmp_path / "b"], max_open_files=3) as store:
        done_keys = [key(app="done", partition=p) for p in range(10)]
        for k in done_keys:
            commit(store, k, k.name.encode() * 50)
        expected = {k: store.read(k, 0, store.committed(k).index.size) for k in done_keys}  # type: ignore[union-attr]
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                files = [store.create(key(app=f"w{t}", partition=p)) for p in range(15)]
                for rnd in range(10):
                    for f in files:
                        f.write([b"%d-%d;" % (f.key.partition, rnd)])
                for f in files:
                    f.commit(whole(f.size))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def reader() -> None:
            try:
                for _ in range(20):
                    for k, data in expected.items():
                        assert store.read(k, 0, len(data)) == data
            except BaseException as exc:  # pragma: no cover
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for w in range(4):
            for p in range(15):
                want = b"".join(b"%d-%d;" % (p, rnd) for rnd in range(10))
                assert store.read(key(app=f"w{w}", partition=p), 0, len(want)) == want


def test_close_releases_every_descriptor(tmp_path: Path) -> None:
    root = tmp_path / "d0"
    store = DiskPartitionStore([root])
    commit(store, key(partition=0), b"data")
    store.read(key(partition=0), 0, 1)
    store.create(key(partition=1)).write([b"open"])
    assert fds_under(root) == 3  # the reader, the writer and the index log
    store.close()
    assert fds_under(root) == 0
    assert (root / "app-1/0/1-0-primary.data").read_bytes() == b"open"  # left as a crash would


# -- writes ---------------------------------------------------------------------------------------


def test_a_failed_write_is_unavailable_and_undone(
    tmp_path: Path, store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = store.create(key())
    f.write([b"keep"])
    real_writev = os.writev
    calls = []

    def failing_writev(fd: int, buffers: Any) -> int:
        calls.append(len(buffers))
        if len(calls) == 1:
            return real_writev(fd, [bytes(buffers[0])[:2]])  # a short write, then the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", failing_writev)
    with pytest.raises(Unavailable) as caught:
        f.write([b"lost", b"too"])
    assert str(f.data_path) in caught.value.message and "ENOSPC" in caught.value.message
    assert isinstance(caught.value.__cause__, OSError)
    assert f.size == 4
    assert f.data_path.read_bytes() == b"keep"
    monkeypatch.undo()
    f.write([b"more"])  # the retry starts where the file was
    f.commit(whole(8))
    assert store.read(key(), 0, 8) == b"keepmore"


def test_short_writes_and_many_pieces(store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_writev = os.writev
    calls = []

    def dribbling_writev(fd: int, buffers: Any) -> int:
        calls.append(len(buffers))
        return real_writev(fd, [bytes(buffers[0])[:3]])

    f = store.create(key())
    monkeypatch.setattr(os, "writev", dribbling_writev)
    f.write([b"abcdefgh", memoryview(b"ijklm"), b"", b"nopqrstuvwxyz"])
    monkeypatch.undo()
    assert len(calls) > 3
    pieces = [bytes([i % 256]) for i in range(3 * _fds.IOV_MAX + 5)]  # more than one writev can take
    f.write(pieces)
    data = b"abcdefghijklmnopqrstuvwxyz" + b"".join(pieces)
    f.commit(whole(len(data)))
    assert store.read(key(), 0, len(data)) == data


def test_a_writev_call_takes_every_piece_when_it_can(
    store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_writev = os.writev
    calls: list[int] = []

    def counting_writev(fd: int, buffers: Any) -> int:
        calls.append(len(buffers))
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", counting_writev)
    f = store.create(key())
    f.write([b"x" * 1000, memoryview(b"y" * 5000), b"z"])
    assert calls == [3]


def test_commit_is_durable(store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = os.fsync
    synced: list[str] = []

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    f = store.create(key())
    f.write([b"abc"])
    monkeypatch.setattr(os, "fsync", recording_fsync)
    f.commit(whole(3))
    # the data, the dir's index log, and the dir: the log's name is new
    assert [Path(p).name for p in synced] == ["0-0-primary.data", "index.log", "0"]
    synced.clear()
    f = store.create(key(partition=1))
    f.write([b"abc"])
    f.commit(whole(3))
    assert [Path(p).name for p in synced] == ["1-0-primary.data", "index.log"]


def test_a_failed_commit_can_be_retried(store: DiskPartitionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    f = store.create(key())
    f.write([b"abc"])

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(Unavailable, match="EIO"):
        f.commit(whole(3))
    monkeypatch.undo()
    assert store.committed(key()) is None
    f.commit(whole(3))
    assert store.read(key(), 0, 3) == b"abc"
