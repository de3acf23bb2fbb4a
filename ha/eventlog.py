"""The event-log port, its errors, and the in-memory twin.

The master is event-sourced (DESIGN §4): every decided command yields events,
which are appended to an :class:`EventLog` *durably* before they are folded in
and before the master replies. The log knows nothing about events: a record
is opaque ``bytes`` that the master encodes itself.

Contract, shared by every backend (``MemoryEventLog``, ``FileEventLog``, the
ZooKeeper log) and pinned by ``tests/ha/test_eventlog_conformance.py``:

- Records get consecutive sequence numbers; the first record ever written is
  seq 1. ``append`` takes one *group* (one group commit) and is atomic: after
  a crash either the whole group is in the log or none of it is.
- ``write_snapshot(seq, data)`` stores the caller's folded state through
  ``seq`` and then drops every record ``<= seq``. Reading those records again
  raises :class:`LogTruncated`.
- ``read(after)`` yields the records that exist when it is called; records
  appended later are not part of that iteration.
- One process at a time: opening a log that is already open raises
  :class:`LogLocked`.

Recovery, for a caller::

    snap = log.latest_snapshot()
    start = snap[0] if snap else 0
    state = decode(snap[1]) if snap else empty_state()
    for seq, record in log.read(after=start):
        state = apply(state, decode_event(record))

:func:`replay` does the reading half of that.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from croupier.core.errors import CroupierError, Unavailable

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_RECORD_BYTES",
    "RECORD_OVERHEAD",
    "EventLog",
    "LogCorrupted",
    "LogLocked",
    "LogTruncated",
    "MemoryEventLog",
    "MemoryLogStore",
    "batch_bytes",
    "replay",
]

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""The largest record payload any backend accepts; bigger ones raise ``ValueError``."""

RECORD_OVERHEAD = 16
"""What a record costs a group beyond its payload, as ``max_batch_bytes`` counts it: the file
log's record header, which is more than the ZooKeeper log's length prefix plus the record's
share of its batch header."""

MAX_BATCH_BYTES = MAX_RECORD_BYTES + RECORD_OVERHEAD
"""The memory and file logs' ``max_batch_bytes``: one group holds at most one record's worth."""


def batch_bytes(records: Sequence[bytes]) -> int:
    """The size of a group as ``EventLog.max_batch_bytes`` counts it."""
    return sum(len(r) + RECORD_OVERHEAD for r in records)


class LogTruncated(CroupierError):
    """The records asked for were dropped by a snapshot.

    ``details`` holds ``after`` (what the caller asked for) and
    ``snapshot_seq``; records ``after + 1 .. snapshot_seq`` are gone. Recover
    from ``latest_snapshot()`` instead.
    """

    code = "INTERNAL"

    @classmethod
    def of(cls, after: int, snapshot_seq: int) -> LogTruncated:
        return cls(
            f"records {after + 1}..{snapshot_seq} were truncated by the snapshot at seq {snapshot_seq};"
            f" read with after >= {snapshot_seq} and start from the snapshot",
            {"after": after, "snapshot_seq": snapshot_seq},
        )


class LogCorrupted(CroupierError):
    """Stored data failed validation somewhere other than a torn tail.

    Never repaired automatically: the message names the file and offset so an
    operator can look. ``details`` holds ``path`` and, where known, ``offset``.
    """

    code = "INTERNAL"


class LogLocked(Unavailable):
    """The log is already open, in this process or another one.

    Two masters must never write one log; the holder has to close it (or
    exit) first, which is why this is retriable.
    """


def _as_bytes(record: object) -> bytes:
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(f"records must be bytes, not {type(record).__name__}")
    return bytes(record)


def _check_group(records: Sequence[bytes]) -> list[bytes]:
    """Validate a whole group before any of it is written (appends are all-or-nothing)."""
    group = [_as_bytes(r) for r in records]
    for i, record in enumerate(group):
        if len(record) > MAX_RECORD_BYTES:
            raise ValueError(
                f"record {i} of the group is {len(record)} bytes; the limit is {MAX_RECORD_BYTES}"
            )
    return group


def _check_snapshot_seq(seq: int, last_seq: int, snapshot_seq: int) -> None:
    if seq < 0:
        raise ValueError(f"snapshot seq must be >= 0, not {seq}")
    if seq > last_seq:
        raise ValueError(f"snapshot seq {seq} is beyond the last record {last_seq}")
    if seq < snapshot_seq:
        raise ValueError(f"snapshot seq {seq} is older than the current snapshot at {snapshot_seq}")


@runtime_checkable
class EventLog(Protocol):
    """A durable, append-only sequence of opaque records, plus one snapshot.

    Every method may be called from any thread; implementations serialise
    them with a lock. After ``close()`` every other method raises
    ``ValueError``.

    State:
        max_record_bytes: the largest record ``append`` accepts (``MAX_RECORD_BYTES`` for
            the memory and file logs; less for ZooKeeper, whose znodes hold ~1 MiB).
        max_batch_bytes: the largest group, counted by ``batch_bytes``, to give one ``append``
            (the group committer's bound). The ZooKeeper log refuses a larger group (one znode
            holds it); the memory and file logs take one but say ``MAX_BATCH_BYTES``, their
            record limit, so that one write and fsync stay bounded.
    """

    max_record_bytes: int
    max_batch_bytes: int

    def append(self, records: Sequence[bytes]) -> int:
        """Durably append one group (one group commit), all or nothing.

        Returns the seq of the last record of the group, or ``last_seq()``
        for an empty group.

        Raises:
            ValueError: a record is larger than ``max_record_bytes`` (nothing is appended).
            TypeError: a record is not bytes-like.
            Unavailable: the storage failed; the log refuses further writes.
        """
        ...

    def read(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(seq, record)`` for every record with ``seq > after``, in order.

        Raises:
            LogTruncated: ``after`` is below the newest snapshot's seq (raised by
                the call itself, not by the first ``next``).
            ValueError: ``after`` is negative.
        """
        ...

    def last_seq(self) -> int:
        """The seq of the newest record, or of the snapshot if the log is empty after it; 0 at first."""
        ...

    def write_snapshot(self, seq: int, data: bytes) -> None:
        """Durably and atomically store ``data`` (the state folded through ``seq``),
        then drop the records ``<= seq``.

        Raises:
            ValueError: ``seq > last_seq()`` or ``seq`` below the current snapshot's seq.
            Unavailable: the storage failed.
        """
        ...

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """``(seq, data)`` of the newest snapshot, or ``None``."""
        ...

    def close(self) -> None:
        """Release the log. Idempotent."""
        ...


def replay(log: EventLog) -> tuple[bytes | None, int, list[tuple[int, bytes]]]:
    """Read everything recovery needs: ``(snapshot data or None, snapshot seq or 0, tail)``."""
    snap = log.latest_snapshot()
    start = snap[0] if snap else 0
    return (snap[1] if snap else None), start, list(log.read(after=start))


class MemoryLogStore:
    """What a :class:`MemoryEventLog` keeps across close and reopen, like a data directory.

    State:
        records: the records after the snapshot; ``records[i]`` has seq ``base + 1 + i``.
        base: seq of the snapshot (0 without one).
        snapshot: ``(seq, data)`` or ``None``.
        in_use: whether a ``MemoryEventLog`` has it open.
        lock: guards all of the above.
    """

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.base = 0
        self.snapshot: tuple[int, bytes] | None = None
        self.in_use = False
        self.lock = threading.Lock()


class MemoryEventLog:
    """The in-memory twin of :class:`FileEventLog`, with the same semantics.

    "Durable" means: kept in ``store``, which outlives this object. Reopen with
    ``MemoryEventLog(old.store)`` to simulate a restart.

    Parameters:
        store: the store to open; a new, empty one by default.

    State:
        store: the :class:`MemoryLogStore`, held exclusively until ``close()``.

    Raises:
        LogLocked: ``store`` is open in another ``MemoryEventLog``.
    """

    max_record_bytes = MAX_RECORD_BYTES
    max_batch_bytes = MAX_BATCH_BYTES

    def __init__(self, store: MemoryLogStore | None = None) -> None:
        self.store = store if store is not None else MemoryLogStore()
        with self.store.lock:
            if self.store.in_use:
                raise LogLocked("this memory log store is already open; close the other log first")
            self.store.in_use = True
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the event log is closed")

    def append(self, records: Sequence[bytes]) -> int:
        group = _check_group(records)
        s = self.store
        with s.lock:
            self._check_open()
            s.records.extend(group)
            return s.base + len(s.records)

    def read(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        if after < 0:
            raise ValueError(f"after must be >= 0, not {after}")
        s = self.store
        with s.lock:
            self._check_open()
            if after < s.base:
                raise LogTruncated.of(after, s.base)
            tail = s.records[after - s.base :]
            first = after + 1
        return ((first + i, record) for i, record in enumerate(tail))

    def last_seq(self) -> int:
        s = self.store
        with s.lock:
            self._check_open()
            return s.base + len(s.records)

    def write_snapshot(self, seq: int, data: bytes) -> None:
        data = _as_bytes(data)
        s = self.store
        with s.lock:
            self._check_open()
            _check_snapshot_seq(seq, s.base + len(s.records), s.base)
            s.snapshot = (seq, data)
            del s.records[: seq - s.base]
            s.base = seq

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        s = self.store
        with s.lock:
            self._check_open()
            return s.snapshot

    def close(self) -> None:
        s = self.store
        with s.lock:
            if not self._closed:
                self._closed = True
                s.in_use = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"last_seq={self.store.base + len(self.store.records)}"
        return f"<MemoryEventLog {state}>"
