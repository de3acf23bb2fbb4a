"""``FileEventLog``: the embedded master's durable event log, in one directory.

On-disk format (all integers little-endian)
-------------------------------------------

Directory::

    LOCK                           empty; held with flock(LOCK_EX | LOCK_NB) while the log is open
    log-<first_seq:020d>.seg       segment files; first_seq is the seq of the segment's first record
    snapshot-<seq:020d>.snap       the newest snapshot (older ones are deleted once it is durable)
    snapshot-<seq:020d>.snap.tmp   a snapshot being written; deleted on open

Segment file: records back to back, no file header. One record is a 16-byte
header (``struct "<IIQ"``) followed by the payload::

    offset  size  field
    0       4     size_flags  u32: bits 0-30 payload length (at most 64 MiB),
                              bit 31 END_OF_GROUP (set on the last record of each group)
    4       4     crc         u32: zlib.crc32 over bytes 0-3 (size_flags), then
                              bytes 8-15 (seq), then the payload
    8       8     seq         u64: consecutive from 1 across all segments
    16      len   payload     the caller's opaque record

A group (one ``append``) is encoded into one buffer, written with one
``os.write`` and made durable with one ``os.fsync``. ``END_OF_GROUP`` is what
makes a group atomic: records after the last ``END_OF_GROUP`` record are an
unfinished group and are never returned. A new segment is started, before a
group, once the current one holds ``segment_bytes`` or more; a group is never
split across segments. A segment is born holding its first group: written as
``log-<first_seq>.seg.tmp``, fsync'ed, renamed, and its name fsync'ed into the
directory. So no segment file is ever empty, and an empty one is damage.

A failed write (``ENOSPC``, ``EIO``) refuses that group (``Unavailable``); the
group is not durable and is never read. The next write first cuts the last
segment back to its last durable group and fsyncs it (a reopen in place); if
that works, writing goes on, so a disk that filled up once works again as soon
as it has space, without a restart.

Snapshot file: a 28-byte header (``struct "<8sQQI"``) followed by the data::

    offset  size  field
    0       8     magic   b"CRSNAP01"
    8       8     seq     u64: the state folded through this seq (equals the name's seq)
    16      8     length  u64: bytes of data (the file is exactly 28 + length bytes)
    24      4     crc     u32: zlib.crc32 over bytes 8-23, then the data
    28      len   data    the caller's serialised state

Writing one: write ``.tmp``, fsync, ``os.replace`` to the final name, fsync
the directory. Only then are the older snapshot and every segment whose
records are all ``<= seq`` deleted. Records ``<= seq`` that share the current
segment with newer ones stay on disk and are skipped by ``read``.

Opening (recovery)
------------------

1. Take the ``LOCK``; delete ``*.tmp``.
2. Load and validate the newest snapshot; if it is damaged, raise
   ``LogCorrupted`` (falling back to an older state would lose records).
   Delete older snapshots.
3. Delete segments that a following segment's name proves are wholly
   ``<= snapshot seq`` (left over by a crash after a snapshot).
4. Validate every record of the rest: length, crc, seq consecutive from the
   segment's name, and each segment continuing the previous one with no gap.
   A 0-byte segment, or a missing one (a gap), is ``LogCorrupted``.
5. A *torn tail* is damage or an unfinished group at the end of the LAST
   segment with no valid record after it (no valid record right behind the
   damaged one's stated length, nor anywhere with seq in ``[s, s + 64]``,
   ``s`` being the damaged record's expected seq). It is cut off at the end of
   the last complete group, the file is fsync'ed, and a warning names the file,
   the offset and the bytes cut (a segment left with no complete group is
   deleted). Any other damage raises ``LogCorrupted``; nothing is repaired or
   cut (only files made redundant by the snapshot, in steps 1-3, may already be
   gone). One consequence: if a crash persisted a later page of the last group
   but not an earlier one, that also raises ``LogCorrupted``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from croupier.core.errors import Unavailable
from croupier.ha.eventlog import (
    MAX_BATCH_BYTES,
    MAX_RECORD_BYTES,
    LogCorrupted,
    LogLocked,
    LogTruncated,
    _as_bytes,
    _check_group,
    _check_snapshot_seq,
)

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "END_OF_GROUP",
    "RECORD_HEADER",
    "SNAPSHOT_HEADER",
    "SNAPSHOT_MAGIC",
    "FileEventLog",
    "encode_group",
]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

RECORD_HEADER = struct.Struct("<IIQ")
END_OF_GROUP = 1 << 31
_LENGTH_MASK = END_OF_GROUP - 1
_CRC_FIELDS = struct.Struct("<IQ")  # size_flags and seq, the header bytes the crc covers
_SEQ = struct.Struct("<Q")

SNAPSHOT_HEADER = struct.Struct("<8sQQI")
SNAPSHOT_MAGIC = b"CRSNAP01"
_SNAPSHOT_CRC_FIELDS = struct.Struct("<QQ")

LOCK_NAME = "LOCK"
_SEGMENT_NAME = re.compile(r"log-(\d{20})\.seg")
_SNAPSHOT_NAME = re.compile(r"snapshot-(\d{20})\.snap")
# How many seqs past a damaged record to look for before calling it a torn tail.
# Each costs one bytes.find over the damaged region, so it stays small.
_RESYNC_SEQS = 64


def _segment_name(first_seq: int) -> str:
    return f"log-{first_seq:020d}.seg"


def _snapshot_name(seq: int) -> str:
    return f"snapshot-{seq:020d}.snap"


def _record_crc(size_flags: int, seq: int, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(_CRC_FIELDS.pack(size_flags, seq)))


def encode_group(records: Sequence[bytes], first_seq: int) -> bytes:
    """The bytes of one group as written to a segment (exposed for tests and tools)."""
    parts: list[bytes] = []
    last = len(records) - 1
    for i, payload in enumerate(records):
        seq = first_seq + i
        size_flags = len(payload) | (END_OF_GROUP if i == last else 0)
        parts.append(RECORD_HEADER.pack(size_flags, _record_crc(size_flags, seq, payload), seq))
        parts.append(payload)
    return b"".join(parts)


def _record_at(data: bytes, offset: int) -> tuple[int, bool, int] | None:
    """``(seq, end_of_group, next_offset)`` of a fully valid record at ``offset``, else None."""
    if len(data) - offset < RECORD_HEADER.size:
        return None
    size_flags, crc, seq = RECORD_HEADER.unpack_from(data, offset)
    length = size_flags & _LENGTH_MASK
    end = offset + RECORD_HEADER.size + length
    if length > MAX_RECORD_BYTES or end > len(data):
        return None
    if _record_crc(size_flags, seq, memoryview(data)[offset + RECORD_HEADER.size : end]) != crc:
        return None
    return seq, bool(size_flags & END_OF_GROUP), end


def _valid_record_after(data: bytes, bad: int, seq: int) -> int | None:
    """Offset of a valid record (seq >= ``seq``) after the damaged one at ``bad``, if any."""
    if len(data) - bad >= RECORD_HEADER.size:
        # Payload, crc or seq damage leaves the length intact: the next record is right behind.
        size_flags: int = RECORD_HEADER.unpack_from(data, bad)[0]
        stated = size_flags & _LENGTH_MASK
        behind = bad + RECORD_HEADER.size + stated
        found = _record_at(data, behind)
        if found is not None and found[0] >= seq:
            return behind
    # The length itself may be damaged: look for a header carrying one of the next seqs.
    for candidate in range(seq, seq + _RESYNC_SEQS + 1):
        pattern = _SEQ.pack(candidate)
        hit = data.find(pattern, bad + 1 + 8)
        while hit != -1:
            found = _record_at(data, hit - 8)
            if found is not None and found[0] == candidate:
                return hit - 8
            hit = data.find(pattern, hit + 1)
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _corrupted(path: Path, offset: int | None, why: str) -> LogCorrupted:
    where = f"{path}" if offset is None else f"{path} at offset {offset}"
    return LogCorrupted(
        f"event log corrupted: {where}: {why}; refusing to open (not a torn tail, so not repaired)",
        {"path": str(path), "offset": offset},
    )


def _read_snapshot(path: Path, seq: int) -> bytes:
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < SNAPSHOT_HEADER.size:
        raise _corrupted(path, None, f"snapshot is {len(raw)} bytes, shorter than its header")
    magic, header_seq, length, crc = SNAPSHOT_HEADER.unpack_from(raw)
    if magic != SNAPSHOT_MAGIC:
        raise _corrupted(path, 0, f"bad snapshot magic {magic!r}")
    if header_seq != seq:
        raise _corrupted(path, 8, f"snapshot header says seq {header_seq}, its name says {seq}")
    if len(raw) != SNAPSHOT_HEADER.size + length:
        held = len(raw) - SNAPSHOT_HEADER.size
        raise _corrupted(path, None, f"snapshot holds {held} bytes, its header says {length}")
    data = raw[SNAPSHOT_HEADER.size :]
    if zlib.crc32(data, zlib.crc32(raw[8:24])) != crc:
        raise _corrupted(path, None, "snapshot checksum mismatch")
    return data


@dataclass(frozen=True, slots=True)
class _Segment:
    first_seq: int
    path: Path


class FileEventLog:
    """An :class:`~croupier.ha.eventlog.EventLog` in a directory: fsync'ed segments and one snapshot.

    See the module docstring for the on-disk format and the recovery rules.
    Opening recovers (and may cut a torn tail); it never starts threads.

    Parameters:
        directory: the data directory; created if missing. One log per directory.
        segment_bytes: start a new segment file, at a group boundary, once the
            current one holds this many bytes.

    State:
        _segments: the live segment files, oldest first; the last is open for append.
        _size: bytes of complete groups in the last segment.
        _last_seq, _snapshot_seq: as returned by ``last_seq()`` / ``latest_snapshot()``.
        _failed: the OSError that broke an append; the next write first cuts the last segment
            back to ``_size`` (``_recover_from_failure``) and raises ``Unavailable`` if it cannot.
        _lock: serialises every method (appends and snapshots from different threads).

    Raises:
        LogLocked: another open log (in any process) holds the directory.
        LogCorrupted: damage that is not a torn tail, or a damaged newest snapshot.
        Unavailable: the directory cannot be read or written.
    """

    max_record_bytes = MAX_RECORD_BYTES
    max_batch_bytes = MAX_BATCH_BYTES

    def __init__(
        self, directory: str | os.PathLike[str], *, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        if segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, not {segment_bytes}")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._closed = False
        self._failed: OSError | None = None
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._size = 0
        self._last_seq = 0
        self._snapshot_seq: int | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise Unavailable(f"cannot open event log directory {self.directory}: {exc}") from exc
        try:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise LogLocked(
                    f"event log {self.directory} is already open (flock on {LOCK_NAME} is held);"
                    " only one master may use a data directory",
                    {"path": str(self.directory)},
                ) from exc
            self._recover()
        except BaseException as exc:
            self._release()
            if isinstance(exc, OSError):
                raise Unavailable(f"cannot open event log {self.directory}: {exc}") from exc
            raise

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self) -> None:
        segments: list[_Segment] = []
        snapshots: list[int] = []
        for name in os.listdir(self.directory):
            path = self.directory / name
            if name.endswith(".tmp"):
                path.unlink()
            elif m := _SEGMENT_NAME.fullmatch(name):
                segments.append(_Segment(int(m[1]), path))
            elif m := _SNAPSHOT_NAME.fullmatch(name):
                snapshots.append(int(m[1]))
        segments.sort(key=lambda s: s.first_seq)
        snapshots.sort()

        if snapshots:
            newest = snapshots[-1]
            _read_snapshot(self.directory / _snapshot_name(newest), newest)
            self._snapshot_seq = newest
            for old in snapshots[:-1]:
                (self.directory / _snapshot_name(old)).unlink()
        base = self._snapshot_seq or 0

        live: list[_Segment] = []
        for i, seg in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].first_seq - 1 <= base:
                seg.path.unlink()  # wholly in the snapshot; a crash came before its deletion
            else:
                live.append(seg)

        last, sizes = base, []
        for i, seg in enumerate(live):
            if i == 0 and not 1 <= seg.first_seq <= base + 1:
                raise _corrupted(
                    seg.path, None, f"records {base + 1}..{seg.first_seq - 1} are missing before this segment"
                )
            if i > 0 and seg.first_seq != last + 1:
                raise _corrupted(
                    seg.path, None, f"seq gap: the previous segment ends at {last}, this one starts later"
                )
            size, last = self._validate_segment(seg, is_last=i == len(live) - 1)
            sizes.append(size)

        if live and (last <= base or sizes[-1] == 0):
            # the newest segment is wholly in the snapshot too, or its only group was torn (deleted)
            with contextlib.suppress(FileNotFoundError):
                live.pop().path.unlink()
            sizes.pop()
        self._size = sizes[-1] if sizes else 0
        self._segments = live
        self._last_seq = max(last, base)
        if live:
            self._fd = os.open(live[-1].path, os.O_WRONLY | os.O_APPEND)

    def _validate_segment(self, seg: _Segment, *, is_last: bool) -> tuple[int, int]:
        """Check every record; cut a torn tail of the last segment. Returns ``(size, last seq)``."""
        with open(seg.path, "rb") as f:
            data = f.read()
        if not data:
            raise _corrupted(seg.path, None, "the segment is empty (segments are born holding a group)")
        offset, seq = 0, seg.first_seq
        group_end, group_seq = 0, seg.first_seq - 1
        bad: int | None = None
        while offset < len(data):
            found = _record_at(data, offset)
            if found is None:
                bad = offset
                break
            record_seq, end_of_group, offset = found
            if record_seq != seq:
                raise _corrupted(seg.path, offset, f"record has seq {record_seq}, expected {seq}")
            seq += 1
            if end_of_group:
                group_end, group_seq = offset, seq - 1
        if group_end == len(data):
            return group_end, group_seq

        if not is_last:
            if bad is None:
                raise _corrupted(
                    seg.path, group_end, "unfinished group at the end of a segment that is not the last"
                )
            raise _corrupted(
                seg.path, bad, f"invalid record (expected seq {seq}) in a segment that is not the last"
            )
        if bad is not None:
            good = _valid_record_after(data, bad, seq)
            if good is not None:
                raise _corrupted(
                    seg.path, bad, f"invalid record (expected seq {seq}) followed by a valid one at {good}"
                )
        if group_end == 0:
            seg.path.unlink()  # never leave an empty segment: it would read as damage
            _fsync_dir(self.directory)
        else:
            with open(seg.path, "r+b") as f:
                f.truncate(group_end)
                f.flush()
                os.fsync(f.fileno())
        log.warning(
            "event log %s: torn tail at offset %d: cut %d bytes (an unfinished group from seq %d)",
            seg.path,
            group_end,
            len(data) - group_end,
            group_seq + 1,
        )
        return group_end, group_seq

    # -- the port ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"the event log {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failed is not None:
            self._recover_from_failure(self._failed)

    def _recover_from_failure(self, failed: OSError) -> None:
        """Cut the last segment back to its last durable group, fsync it, and write again.

        Raises:
            Unavailable: the cut failed too (the disk is still full or broken); retried next write.
        """
        try:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            with contextlib.suppress(FileNotFoundError):  # a new segment whose rename failed
                (self.directory / _segment_name(self._last_seq + 1)).unlink()
            if self._segments:
                fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
                self._fd = fd
                os.ftruncate(fd, self._size)
                os.fsync(fd)
        except OSError as exc:
            raise Unavailable(
                f"event log {self.directory} refused a write: an earlier write failed ({failed})"
                f" and the log cannot be cut back to seq {self._last_seq} yet ({exc})"
            ) from exc
        log.warning(
            "event log %s: writable again after a failed write (%s); it holds seq 1..%d",
            self.directory,
            failed,
            self._last_seq,
        )
        self._failed = None

    def append(self, records: Sequence[bytes]) -> int:
        """See :meth:`EventLog.append`. One ``os.write`` and one ``os.fsync`` per group.

        Raises:
            Unavailable: the write or fsync failed. The group may or may not be
                durable; this log refuses further writes, and a reopen tells.
        """
        group = _check_group(records)
        with self._lock:
            self._check_writable()
            if not group:
                return self._last_seq
            buf = encode_group(group, self._last_seq + 1)
            try:
                if self._fd is None or self._size >= self.segment_bytes:
                    self._start_segment(buf)
                else:
                    _write_all(self._fd, buf)
                    os.fsync(self._fd)
            except OSError as exc:
                # After a failed write or fsync the page cache state is unknown: the next write
                # cuts the group off before anything else is written (_recover_from_failure).
                self._failed = exc
                raise Unavailable(f"cannot append to event log {self.directory}: {exc}") from exc
            self._size += len(buf)
            self._last_seq += len(group)
            return self._last_seq

    def _start_segment(self, first_group: bytes) -> None:
        """A new segment holding ``first_group``: written as ``.tmp``, fsync'ed, renamed, and
        the directory fsync'ed, so that no segment file is ever empty."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        seg = _Segment(self._last_seq + 1, self.directory / _segment_name(self._last_seq + 1))
        tmp = seg.path.with_name(seg.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            _write_all(fd, first_group)
            os.fsync(fd)
            os.replace(tmp, seg.path)
            _fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._fd = fd
        self._segments.append(seg)
        self._size = 0

    def read(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """See :meth:`EventLog.read`. Reads the files lazily, one segment open at a time.

        Raises:
            LogTruncated: also mid-iteration, if a concurrent snapshot deleted a segment not yet opened.
            LogCorrupted: a record no longer matches its checksum.
        """
        if after < 0:
            raise ValueError(f"after must be >= 0, not {after}")
        with self._lock:
            self._check_open()
            base = self._snapshot_seq or 0
            if after < base:
                raise LogTruncated.of(after, base)
            plan: list[tuple[_Segment, int | None]] = []
            for i, seg in enumerate(self._segments):
                is_last = i == len(self._segments) - 1
                seg_last = self._last_seq if is_last else self._segments[i + 1].first_seq - 1
                if seg_last > after:
                    # The current segment grows under us: stop at the groups that exist now.
                    plan.append((seg, self._size if is_last else None))
            end_seq = self._last_seq
        return self._iter_records(plan, after, end_seq)

    @staticmethod
    def _iter_records(
        plan: list[tuple[_Segment, int | None]], after: int, end_seq: int
    ) -> Iterator[tuple[int, bytes]]:
        for seg, limit in plan:
            try:
                f = open(seg.path, "rb")  # noqa: SIM115 - closed by the with below, across yields
            except FileNotFoundError as exc:
                raise LogTruncated(
                    f"segment {seg.path} was deleted by a snapshot while it was being read;"
                    " read again from the newest snapshot",
                    {"after": after, "path": str(seg.path)},
                ) from exc
            with f:
                offset, seq = 0, seg.first_seq
                while seq <= end_seq and (limit is None or offset < limit):
                    header = f.read(RECORD_HEADER.size)
                    if not header and limit is None:
                        break
                    if len(header) < RECORD_HEADER.size:
                        raise _corrupted(seg.path, offset, "segment shrank while open")
                    size_flags, crc, record_seq = RECORD_HEADER.unpack(header)
                    length = size_flags & _LENGTH_MASK
                    if record_seq != seq:
                        raise _corrupted(seg.path, offset, f"record has seq {record_seq}, expected {seq}")
                    if seq <= after:
                        f.seek(length, os.SEEK_CUR)
                    else:
                        payload = f.read(length)
                        if len(payload) != length or _record_crc(size_flags, seq, payload) != crc:
                            raise _corrupted(seg.path, offset, f"record {seq} no longer matches its checksum")
                        yield seq, payload
                    offset += RECORD_HEADER.size + length
                    seq += 1

    def last_seq(self) -> int:
        with self._lock:
            self._check_open()
            return self._last_seq

    def write_snapshot(self, seq: int, data: bytes) -> None:
        """See :meth:`EventLog.write_snapshot`. Failing to delete old files only logs a
        warning: the next open deletes them.

        Raises:
            Unavailable: the snapshot could not be made durable; the previous one still stands.
        """
        data = _as_bytes(data)
        with self._lock:
            self._check_writable()
            _check_snapshot_seq(seq, self._last_seq, self._snapshot_seq or 0)
            final = self.directory / _snapshot_name(seq)
            tmp = final.with_name(final.name + ".tmp")
            crc = zlib.crc32(data, zlib.crc32(_SNAPSHOT_CRC_FIELDS.pack(seq, len(data))))
            header = SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, seq, len(data), crc)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    _write_all(fd, header)
                    _write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, final)
                _fsync_dir(self.directory)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise Unavailable(f"cannot write a snapshot to {self.directory}: {exc}") from exc
            previous, self._snapshot_seq = self._snapshot_seq, seq
            self._drop_before(seq, previous)

    def _drop_before(self, seq: int, previous_snapshot: int | None) -> None:
        doomed: list[Path] = []
        if previous_snapshot is not None and previous_snapshot != seq:
            doomed.append(self.directory / _snapshot_name(previous_snapshot))
        keep: list[_Segment] = []
        for i, seg in enumerate(self._segments):
            is_last = i == len(self._segments) - 1
            seg_last = self._last_seq if is_last else self._segments[i + 1].first_seq - 1
            if seg_last > seq:
                keep.append(seg)
                continue
            doomed.append(seg.path)
            if is_last and self._fd is not None:
                # The next append starts a fresh segment named after its first seq.
                os.close(self._fd)
                self._fd = None
                self._size = 0
        self._segments = keep
        for path in doomed:
            try:
                path.unlink()
            except OSError as exc:
                log.warning("event log %s: cannot delete %s after a snapshot: %s", self.directory, path, exc)

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """See :meth:`EventLog.latest_snapshot`. Reads the file again, checksum included.

        Raises:
            LogCorrupted: the snapshot file was damaged after the log was opened.
        """
        with self._lock:
            self._check_open()
            if self._snapshot_seq is None:
                return None
            seq = self._snapshot_seq
            try:
                return seq, _read_snapshot(self.directory / _snapshot_name(seq), seq)
            except OSError as exc:
                raise Unavailable(f"cannot read the snapshot in {self.directory}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd >= 0:
            # Closing the descriptor drops the flock.
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"last_seq={self._last_seq}"
        return f"<FileEventLog {self.directory} {state}>"
