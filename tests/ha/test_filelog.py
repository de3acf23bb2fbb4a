"""FileEventLog specifics: the byte format, torn tails, corruption, locking, segments on disk."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.errors import Unavailable
from croupier.ha.eventlog import LogCorrupted, LogLocked, LogTruncated
from croupier.ha.filelog import RECORD_HEADER, FileEventLog, encode_group

# Three groups: one record, two records, three records (the last group).
GROUPS = [[b"alpha"], [b"bravo", b"charlie"], [b"delta", b"echo", b"foxtrot"]]


class Opener:
    """Opens FileEventLogs and closes whatever is still open at teardown."""

    def __init__(self) -> None:
        self.opened: list[FileEventLog] = []

    def __call__(self, directory: Path, **kwargs: int) -> FileEventLog:
        log = FileEventLog(directory, **kwargs)
        self.opened.append(log)
        return log


@pytest.fixture
def open_log() -> Iterator[Opener]:
    opener = Opener()
    yield opener
    for log in opener.opened:
        log.close()


def write(directory: Path, groups: list[list[bytes]], **kwargs: int) -> None:
    with FileEventLog(directory, **kwargs) as log:
        for g in groups:
            log.append(g)


def segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("log-*.seg"))


def only_segment(directory: Path) -> Path:
    (name,) = segments(directory)
    return directory / name


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def records(log: FileEventLog) -> list[bytes]:
    return [r for _, r in log.read()]


# -- the format, byte for byte ---------------------------------------------------------------


def test_record_bytes_match_the_documented_format(tmp_path: Path) -> None:
    write(tmp_path, [[b"hi", b""], [b"xyz"]])
    assert sorted(os.listdir(tmp_path)) == ["LOCK", "log-00000000000000000001.seg"]

    def record(seq: int, payload: bytes, end: bool) -> bytes:
        size_flags = len(payload) | (1 << 31 if end else 0)
        crc = zlib.crc32(struct.pack("<I", size_flags) + struct.pack("<Q", seq) + payload)
        return struct.pack("<IIQ", size_flags, crc, seq) + payload

    expected = record(1, b"hi", False) + record(2, b"", True) + record(3, b"xyz", True)
    assert (tmp_path / "log-00000000000000000001.seg").read_bytes() == expected
    assert encode_group([b"hi", b""], 1) + encode_group([b"xyz"], 3) == expected


def test_snapshot_bytes_match_the_documented_format(tmp_path: Path) -> None:
    with FileEventLog(tmp_path) as log:
        log.append([b"a", b"b"])
        log.write_snapshot(2, b"state")
    raw = (tmp_path / "snapshot-00000000000000000002.snap").read_bytes()
    crc = zlib.crc32(struct.pack("<QQ", 2, 5) + b"state")
    assert raw == struct.pack("<8sQQI", b"CRSNAP01", 2, 5, crc) + b"state"
    # The only segment held records <= 2, so it is gone.
    assert sorted(os.listdir(tmp_path)) == ["LOCK", "snapshot-00000000000000000002.snap"]


def test_directory_is_created(tmp_path: Path, open_log: Opener) -> None:
    log = open_log(tmp_path / "a" / "b")
    log.append([b"x"])
    assert (tmp_path / "a" / "b" / "log-00000000000000000001.seg").exists()


def test_bad_segment_bytes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="segment_bytes"):
        FileEventLog(tmp_path, segment_bytes=0)


# -- torn tails -------------------------------------------------------------------------------


def test_torn_tail_at_every_offset_of_the_last_group(
    tmp_path: Path, open_log: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    template = tmp_path / "template"
    write(template, GROUPS)
    seg_name = segments(template)[0]
    full = (template / seg_name).read_bytes()
    start = len(encode_group(GROUPS[0], 1) + encode_group(GROUPS[1], 2))
    assert len(full) == start + len(encode_group(GROUPS[2], 4))

    for cut in range(start, len(full)):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(template, d)
        with open(d / seg_name, "r+b") as f:
            f.truncate(cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="croupier.ha.filelog"):
            log = open_log(d)
        assert records(log) == [b"alpha", b"bravo", b"charlie"], cut
        assert log.last_seq() == 3
        assert (d / seg_name).stat().st_size == start
        if cut > start:
            (message,) = [r.getMessage() for r in caplog.records]
            assert seg_name in message
            assert f"offset {start}" in message
            assert f"cut {cut - start} bytes" in message
        else:
            assert caplog.records == []
        assert log.append([b"golf"]) == 4
        log.close()
        log = open_log(d)
        assert records(log) == [b"alpha", b"bravo", b"charlie", b"golf"]
        log.close()


def test_torn_first_group_of_a_fresh_segment(tmp_path: Path, open_log: Opener) -> None:
    write(tmp_path, [[b"a" * 40], [b"b" * 40]], segment_bytes=10)
    assert segments(tmp_path) == ["log-00000000000000000001.seg", "log-00000000000000000002.seg"]
    newest = tmp_path / "log-00000000000000000002.seg"
    content = newest.read_bytes()
    for cut in (5, 30):
        newest.write_bytes(content[:cut])
        log = open_log(tmp_path, segment_bytes=10)
        assert records(log) == [b"a" * 40]
        assert not newest.exists()  # deleted, not left empty: an empty segment is damage
        log.close()
    log = open_log(tmp_path, segment_bytes=10)
    assert log.append([b"c"]) == 2
    assert records(log) == [b"a" * 40, b"c"]


def test_zero_filled_tail_is_cut(tmp_path: Path, open_log: Opener) -> None:
    write(tmp_path, GROUPS[:2])
    seg = only_segment(tmp_path)
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(bytes(4096))
    log = open_log(tmp_path)
    assert records(log) == [b"alpha", b"bravo", b"charlie"]
    assert seg.stat().st_size == good


def test_unfinished_group_at_a_record_boundary_is_cut(tmp_path: Path, open_log: Opener) -> None:
    write(tmp_path, GROUPS)
    seg = only_segment(tmp_path)
    full = seg.read_bytes()
    # Keep two complete records of the last group: valid, but the group never ended.
    keep = len(full) - len(encode_group([b"foxtrot"], 6))
    seg.write_bytes(full[:keep])
    log = open_log(tmp_path)
    assert log.last_seq() == 3


# -- corruption --------------------------------------------------------------------------------


def test_flipped_byte_in_a_middle_record_is_corruption(tmp_path: Path, open_log: Opener) -> None:
    single = [[b"first"], [b"middle"], [b"last"]]
    template = tmp_path / "template"
    write(template, single)
    seg_name = segments(template)[0]
    start = len(encode_group([b"first"], 1))
    end = start + len(encode_group([b"middle"], 2))
    for offset in range(start, end):
        d = tmp_path / f"flip{offset}"
        shutil.copytree(template, d)
        flip(d / seg_name, offset)
        before = (d / seg_name).read_bytes()
        with pytest.raises(LogCorrupted, match=rf"{seg_name} at offset {start}"):
            open_log(d)
        assert (d / seg_name).read_bytes() == before  # nothing repaired or cut
    # A failed open releases the lock.
    with pytest.raises(LogCorrupted):
        open_log(tmp_path / f"flip{start}")


def test_flipped_byte_in_the_last_record_is_a_torn_tail(tmp_path: Path, open_log: Opener) -> None:
    single = [[b"first"], [b"middle"], [b"last"]]
    template = tmp_path / "template"
    write(template, single)
    seg_name = segments(template)[0]
    total = (template / seg_name).stat().st_size
    start = total - len(encode_group([b"last"], 3))
    for offset in range(start, total):
        d = tmp_path / f"flip{offset}"
        shutil.copytree(template, d)
        flip(d / seg_name, offset)
        log = open_log(d)
        assert records(log) == [b"first", b"middle"], offset
        assert log.append([b"again"]) == 3
        log.close()


@settings(max_examples=50, deadline=None, database=None)
@given(
    groups=st.lists(st.lists(st.binary(max_size=30), min_size=1, max_size=4), min_size=1, max_size=6),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    bit=st.integers(min_value=0, max_value=7),
)
def test_any_bit_flip_is_refused_or_cuts_exactly_the_last_group(
    groups: list[list[bytes]], where: float, bit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write(d, groups)
        seg = only_segment(d)
        offset = int(where * seg.stat().st_size)
        flip_bit = bytearray(seg.read_bytes())
        flip_bit[offset] ^= 1 << bit
        seg.write_bytes(bytes(flip_bit))
        last_group_start = sum(len(encode_group(g, 1)) for g in groups[:-1])
        try:
            log = FileEventLog(d)
        except LogCorrupted:
            return
        with log:
            assert offset >= last_group_start
            assert records(log) == [r for g in groups[:-1] for r in g]


def test_damage_followed_by_the_rest_of_the_last_group_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, GROUPS)
    seg = only_segment(tmp_path)
    first_of_last_group = len(encode_group(GROUPS[0], 1) + encode_group(GROUPS[1], 2))
    flip(seg, first_of_last_group + RECORD_HEADER.size)  # payload of "delta"
    with pytest.raises(LogCorrupted, match="followed by a valid one"):
        FileEventLog(tmp_path)


def test_damage_at_the_end_of_a_non_last_segment_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, [[b"a" * 30], [b"b" * 30], [b"c" * 30]], segment_bytes=10)
    first = tmp_path / "log-00000000000000000001.seg"
    flip(first, first.stat().st_size - 1)
    with pytest.raises(LogCorrupted, match="not the last"):
        FileEventLog(tmp_path, segment_bytes=10)


def test_truncated_non_last_segment_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, [[b"a" * 30], [b"b" * 30]], segment_bytes=10)
    first = tmp_path / "log-00000000000000000001.seg"
    with open(first, "r+b") as f:
        f.truncate(20)
    with pytest.raises(LogCorrupted, match="not the last"):
        FileEventLog(tmp_path, segment_bytes=10)


def test_missing_middle_segment_is_a_seq_gap(tmp_path: Path) -> None:
    write(tmp_path, [[b"a" * 30], [b"b" * 30], [b"c" * 30]], segment_bytes=10)
    (tmp_path / "log-00000000000000000002.seg").unlink()
    with pytest.raises(LogCorrupted, match="seq gap"):
        FileEventLog(tmp_path, segment_bytes=10)


def test_missing_first_segment_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, [[b"a" * 30], [b"b" * 30]], segment_bytes=10)
    (tmp_path / "log-00000000000000000001.seg").unlink()
    with pytest.raises(LogCorrupted, match=r"records 1\.\.1 are missing"):
        FileEventLog(tmp_path, segment_bytes=10)


def test_valid_record_with_the_wrong_seq_is_corruption(tmp_path: Path) -> None:
    write(tmp_path, [[b"a"]])
    seg = only_segment(tmp_path)
    with open(seg, "ab") as f:
        f.write(encode_group([b"z"], 5))
    with pytest.raises(LogCorrupted, match="has seq 5, expected 2"):
        FileEventLog(tmp_path)


def test_damage_after_open_is_caught_by_read(tmp_path: Path, open_log: Opener) -> None:
    log = open_log(tmp_path)
    log.append([b"payload"])
    flip(only_segment(tmp_path), RECORD_HEADER.size + 1)
    with pytest.raises(LogCorrupted, match="checksum"):
        list(log.read())


# -- snapshots on disk ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda raw: raw[:10], "shorter than its header"),
        (lambda raw: b"XXXXXXXX" + raw[8:], "magic"),
        (lambda raw: raw[:-1], "holds 4 bytes"),
        (lambda raw: raw[:-1] + b"!", "checksum"),
        (lambda raw: raw[:8] + struct.pack("<Q", 1) + raw[16:], "name says 2"),
    ],
)
def test_corrupt_snapshot_is_refused(tmp_path: Path, damage: object, match: str) -> None:
    with FileEventLog(tmp_path) as log:
        log.append([b"a", b"b", b"c"])
        log.write_snapshot(1, b"old")
        log.write_snapshot(2, b"state")
    snap = tmp_path / "snapshot-00000000000000000002.snap"
    assert callable(damage)
    snap.write_bytes(damage(snap.read_bytes()))
    with pytest.raises(LogCorrupted, match=match):
        FileEventLog(tmp_path)
    assert snap.exists()  # left for the operator


def test_snapshot_deletes_whole_segments_only(tmp_path: Path, open_log: Opener) -> None:
    log = open_log(tmp_path, segment_bytes=50)
    for i in range(1, 11):
        log.append([b"%02d" % i * 20])  # 56 bytes a group: one group per segment
    assert len(segments(tmp_path)) == 10
    log.write_snapshot(4, b"s4")
    assert segments(tmp_path)[0] == "log-00000000000000000005.seg"
    assert len(segments(tmp_path)) == 6
    log.write_snapshot(7, b"s7")
    assert [p.name for p in tmp_path.glob("*.snap")] == ["snapshot-00000000000000000007.snap"]
    assert segments(tmp_path)[0] == "log-00000000000000000008.seg"
    log.write_snapshot(10, b"s10")
    assert segments(tmp_path) == []
    assert log.append([b"next"]) == 11
    assert segments(tmp_path) == ["log-00000000000000000011.seg"]
    log.close()
    log = open_log(tmp_path, segment_bytes=50)
    assert log.latest_snapshot() == (10, b"s10")
    assert list(log.read(after=10)) == [(11, b"next")]


def test_records_before_the_snapshot_in_the_current_segment_are_skipped(
    tmp_path: Path, open_log: Opener
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b", b"c", b"d"])
    log.write_snapshot(2, b"s")
    assert len(segments(tmp_path)) == 1
    log.close()
    log = open_log(tmp_path)
    assert list(log.read(after=2)) == [(3, b"c"), (4, b"d")]
    with pytest.raises(LogTruncated):
        log.read(after=1)


def test_leftovers_of_a_crash_during_a_snapshot_are_cleaned(tmp_path: Path, open_log: Opener) -> None:
    backup = tmp_path / "backup"
    d = tmp_path / "log"
    log = open_log(d, segment_bytes=10)
    for i in range(5):
        log.append([b"r%d" % i])
    log.write_snapshot(1, b"s1")
    log.close()
    shutil.copytree(d, backup)
    log = open_log(d, segment_bytes=10)
    log.write_snapshot(3, b"s3")
    log.close()
    # As if the crash came after the new snapshot was durable, before anything was deleted.
    for p in backup.iterdir():
        if p.name != "LOCK":
            shutil.copy(p, d / p.name)
    (d / "snapshot-00000000000000000004.snap.tmp").write_bytes(b"half")
    log = open_log(d, segment_bytes=10)
    assert log.latest_snapshot() == (3, b"s3")
    assert list(log.read(after=3)) == [(4, b"r3"), (5, b"r4")]
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith("log-")) == [
        "LOCK",
        "snapshot-00000000000000000003.snap",
    ]
    assert segments(d) == ["log-00000000000000000004.seg", "log-00000000000000000005.seg"]


# -- segments, locking, failures ---------------------------------------------------------------


def test_segment_rollover(tmp_path: Path, open_log: Opener) -> None:
    log = open_log(tmp_path, segment_bytes=100)
    big_group = [b"x" * 60, b"y" * 60]  # bigger than a segment: still written whole
    log.append([b"a" * 50])
    log.append([b"b" * 50])  # the first segment is at 66 bytes: still room
    log.append(big_group)
    log.append([b"c"])
    assert segments(tmp_path) == [
        "log-00000000000000000001.seg",
        "log-00000000000000000003.seg",
        "log-00000000000000000005.seg",
    ]
    assert (tmp_path / segments(tmp_path)[1]).read_bytes() == encode_group(big_group, 3)
    log.close()
    log = open_log(tmp_path, segment_bytes=100)
    assert records(log) == [b"a" * 50, b"b" * 50, *big_group, b"c"]
    log.append([b"d"])
    assert len(segments(tmp_path)) == 3  # the last segment still had room


def test_two_opens_of_one_directory(tmp_path: Path, open_log: Opener) -> None:
    first = open_log(tmp_path)
    with pytest.raises(LogLocked, match=str(tmp_path)):
        FileEventLog(tmp_path)
    first.append([b"still fine"])
    first.close()
    second = open_log(tmp_path)
    assert records(second) == [b"still fine"]


def test_failed_fsync_cuts_the_group_and_writes_again_once_the_disk_works(
    tmp_path: Path, open_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append([b"a"])

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(Unavailable, match="Input/output error"):
        log.append([b"b"])
    with pytest.raises(Unavailable, match="cannot be cut back"):
        log.append([b"c"])  # the disk still fails: refused, nothing written
    monkeypatch.undo()
    assert log.last_seq() == 1
    assert log.append([b"d"]) == 2  # b was refused, so it is not durable: cut off, never read
    log.write_snapshot(1, b"s")
    assert list(log.read(after=1)) == [(2, b"d")]
    log.close()
    log = open_log(tmp_path)
    assert log.latest_snapshot() == (1, b"s")
    assert list(log.read(after=1)) == [(2, b"d")]


def test_enospc_is_not_forever(tmp_path: Path, open_log: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 13): after the disk filled once, every write was refused until a restart."""
    log = open_log(tmp_path, segment_bytes=64)
    log.append([b"a" * 40])
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        real_write(fd, bytes(data)[:10])  # a partial write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    for group in ([b"b"], [b"c" * 40]):
        with pytest.raises(Unavailable, match="No space left"):
            log.append(group)
    monkeypatch.undo()
    assert log.append([b"e" * 40]) == 2  # space is back: the same open log writes again
    assert log.append([b"f"]) == 3  # and rolls a new segment
    assert records(log) == [b"a" * 40, b"e" * 40, b"f"]
    log.close()
    assert records(open_log(tmp_path, segment_bytes=64)) == [b"a" * 40, b"e" * 40, b"f"]


def test_a_failed_new_segment_leaves_no_file(
    tmp_path: Path, open_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path, segment_bytes=10)
    log.append([b"a" * 40])

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(Unavailable):
        log.append([b"b"])
    monkeypatch.undo()
    assert segments(tmp_path) == ["log-00000000000000000001.seg"]
    assert log.append([b"c"]) == 2
    assert records(log) == [b"a" * 40, b"c"]


@pytest.mark.parametrize("which", [0, 1])
def test_an_empty_segment_is_corruption(tmp_path: Path, open_log: Opener, which: int) -> None:
    """Regression (issue 13): a 0-byte segment started an empty master with no warning."""
    write(tmp_path, [[b"a" * 40], [b"b" * 40]], segment_bytes=10)
    (tmp_path / segments(tmp_path)[which]).write_bytes(b"")
    with pytest.raises(LogCorrupted, match=r"empty|missing|gap"):
        open_log(tmp_path, segment_bytes=10)


def test_a_zeroed_only_segment_is_corruption(tmp_path: Path, open_log: Opener) -> None:
    write(tmp_path, GROUPS[:2])
    only_segment(tmp_path).write_bytes(b"")
    with pytest.raises(LogCorrupted, match="empty"):
        open_log(tmp_path)


def test_a_missing_middle_segment_is_corruption(tmp_path: Path, open_log: Opener) -> None:
    write(tmp_path, [[b"a" * 40], [b"b" * 40], [b"c" * 40]], segment_bytes=10)
    (tmp_path / segments(tmp_path)[1]).unlink()
    with pytest.raises(LogCorrupted, match="gap"):
        open_log(tmp_path, segment_bytes=10)


def test_failed_snapshot_keeps_the_old_one(
    tmp_path: Path, open_log: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append([b"a", b"b"])
    log.write_snapshot(1, b"s1")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(Unavailable, match="No space"):
        log.write_snapshot(2, b"s2")
    monkeypatch.undo()
    assert log.latest_snapshot() == (1, b"s1")
    assert list(log.read(after=1)) == [(2, b"b")]
    assert not list(tmp_path.glob("*.tmp"))
    log.write_snapshot(2, b"s2")
    assert log.latest_snapshot() == (2, b"s2")
