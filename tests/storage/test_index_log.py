"""The index log of a shuffle dir (storage/index_log.py): commits make no file, and what a
crash, a failed append, a damaged line or an earlier life leaves in the log is never read
as a commit it is not (issue 25)."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from croupier.core.errors import Unavailable
from croupier.storage.disk import DiskPartitionStore, encode_index
from croupier.storage.index_file import decode_record, encode_void
from croupier.storage.index_log import LOG_NAME
from croupier.storage.store import LocationKey
from tests.storage.helpers import key, whole


def committed(root: Path, data: dict[int, bytes], shuffle: int = 0) -> None:
    with DiskPartitionStore([root]) as store:
        for partition, raw in data.items():
            f = store.create(key(shuffle=shuffle, partition=partition))
            f.write([raw])
            f.commit(whole(len(raw)))


def keys_after_restart(root: Path) -> list[LocationKey]:
    with DiskPartitionStore([root]) as store:
        return [c.key for c in store.scan()]


def test_a_commit_creates_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the log, each commit created ``.index.tmp`` (and renamed it): 4,000 file
    creations for 4,000 locations. Now only the dir's first commit makes its log."""
    real_open = os.open
    created: list[str] = []

    def recording_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if flags & os.O_CREAT and not os.path.exists(path):
            created.append(os.path.basename(path))
        return real_open(path, flags, *args, **kw)

    with DiskPartitionStore([tmp_path / "d0"]) as store:
        files = []
        for partition in range(20):
            f = store.create(key(partition=partition))
            f.write([b"abc"])
            files.append(f)
        monkeypatch.setattr(os, "open", recording_open)
        for f in files:
            f.commit(whole(3))
        monkeypatch.undo()
    assert created == [LOG_NAME]
    assert len(keys_after_restart(tmp_path / "d0")) == 20


def test_a_line_torn_by_a_crash_is_skipped_and_takes_no_later_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "d0"
    committed(root, {0: b"zero", 1: b"one"})
    log_path = root / "app-1/0" / LOG_NAME
    torn = encode_index(key(partition=2), whole(3))[:-20]  # a crash during its append
    with open(log_path, "ab") as fh:
        fh.write(torn)
    (root / "app-1/0/2-0-primary.data").write_bytes(b"two")
    with caplog.at_level(logging.WARNING):
        assert keys_after_restart(root) == [key(partition=0), key(partition=1)]
    assert "skipping record 3" in caplog.text
    committed(root, {3: b"three"})  # appended after the torn line, on a line of its own
    assert log_path.read_bytes().count(b"\n") == 4
    assert keys_after_restart(root) == [key(partition=p) for p in (0, 1, 3)]


def test_an_append_that_fails_is_cut_off_and_the_commit_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "d0"
    committed(root, {0: b"zero"})
    log_path = root / "app-1/0" / LOG_NAME
    before = log_path.read_bytes()
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(LOG_NAME):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    with DiskPartitionStore([root]) as store:
        f = store.create(key(partition=1))
        f.write([b"one"])
        monkeypatch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(Unavailable, match="EIO"):
            f.commit(whole(3))  # one dir: there is nowhere to move it
        monkeypatch.undo()
        assert log_path.read_bytes() == before  # the record was written, then cut off
        assert store.committed(key(partition=1)) is None
    with caplog.at_level(logging.WARNING, logger="croupier.storage.index_log"):
        assert keys_after_restart(root) == [key(partition=0)]
    assert "skipping record" not in caplog.text


def test_an_earlier_life_s_record_is_voided_before_its_location_is_written_again(tmp_path: Path) -> None:
    """The old record says 3 bytes; the data of the new life reaches 3 bytes, then the worker
    dies before its commit. Without the void record, the old record would pass its check."""
    root = tmp_path / "d0"
    committed(root, {0: b"old"})
    (root / "app-1/0/0-0-primary.data").unlink()  # the data is lost: the record does not hold
    with DiskPartitionStore([root]) as store:
        assert store.committed(key(partition=0)) is None
        f = store.create(key(partition=0))
        f.write([b"new"])  # not committed: a crash here
    lines = (root / "app-1/0" / LOG_NAME).read_bytes().splitlines()
    assert [decode_record(line) for line in lines] == [(key(partition=0), whole(3)), (key(partition=0), None)]
    assert lines[1] + b"\n" == encode_void(key(partition=0))
    with DiskPartitionStore([root]) as store:
        assert store.scan() == []
        assert store.committed(key(partition=0)) is None
        f = store.create(key(partition=0))  # and it can be written and committed again
        f.write([b"again"])
        f.commit(whole(5))
    with DiskPartitionStore([root]) as store:
        assert store.read(key(partition=0), 0, 5) == b"again"


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"{}",
        encode_index(key(shuffle=1, partition=5), whole(3)).rstrip(),  # another shuffle's
        encode_index(key(partition=5), whole(3)).replace(b'"size":3', b'"size":4').rstrip(),  # its crc
        encode_void(key(partition=0)).replace(b"true", b"false").rstrip(),
    ],
)
def test_a_damaged_or_foreign_record_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, line: bytes
) -> None:
    root = tmp_path / "d0"
    committed(root, {0: b"zero"})
    (root / "app-1/0/5-0-primary.data").write_bytes(b"abc")
    with open(root / "app-1/0" / LOG_NAME, "ab") as fh:
        fh.write(line + b"\n")
    with caplog.at_level(logging.WARNING):
        assert keys_after_restart(root) == [key(partition=0)]
        with DiskPartitionStore([root]) as store:
            assert store.committed(key(partition=5)) is None
            assert store.committed(key(partition=0)) is not None
    assert "skipping record 2" in caplog.text


def test_concurrent_commits_in_one_dir_each_get_a_whole_line(tmp_path: Path) -> None:
    root = tmp_path / "d0"
    with DiskPartitionStore([root]) as store:

        def commit_many(first: int) -> None:
            for partition in range(first, first + 50):
                f = store.create(key(partition=partition))
                f.write([b"%d" % partition])
                f.commit(whole(len(b"%d" % partition)))

        threads = [threading.Thread(target=commit_many, args=(50 * i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert keys_after_restart(root) == sorted(key(partition=p) for p in range(400))
    with DiskPartitionStore([root]) as store:
        assert all(store.read(key(partition=p), 0, len(b"%d" % p)) == b"%d" % p for p in range(400))


def test_each_disk_and_shuffle_has_its_own_log_and_removal_takes_it(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with DiskPartitionStore(dirs) as store:
        for shuffle in (0, 1):
            for partition in range(8):
                f = store.create(key(shuffle=shuffle, partition=partition))
                f.write([b"x"])
                f.commit(whole(1))
        logs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob(LOG_NAME))
        assert logs == [f"{d}/app-1/{s}/{LOG_NAME}" for d in ("d0", "d1") for s in (0, 1)]
        assert store.remove("app-1", 0) == 8
        assert not any((d / "app-1/0").exists() for d in dirs)
        f = store.create(key(shuffle=0, partition=0))  # a new life of the shuffle: a new log
        f.write([b"y"])
        f.commit(whole(1))
    with DiskPartitionStore(dirs) as store:
        assert sorted(c.key for c in store.scan()) == sorted(
            [key(shuffle=0, partition=0), *(key(shuffle=1, partition=p) for p in range(8))]
        )
        assert store.read(key(shuffle=0, partition=0), 0, 1) == b"y"
