"""``ZooKeeperEventLog``: the event-log port (``croupier.ha.eventlog``) kept in ZooKeeper, fenced.

The HA master's log (DESIGN §5). It passes the same conformance suite as the
memory and file logs; on top of that, every write of a *fenced* log is one
ZooKeeper transaction that also checks the leader's term and election node,
so a deposed leader can never append (it gets :class:`Fenced`).

Layout under ``root``
---------------------

::

    <root>/epoch                       not written here: its *version* is the leader's term (the fence)
    <root>/writer                      ephemeral; "<host>:<pid>:<token>" of the open writer (the lock)
    <root>/log/batch-<10 digits>       persistent sequential; one znode per append (group commit)
    <root>/snapshots/latest            the snapshot pointer (JSON, below); empty data = no snapshot yet
    <root>/snapshots/snap-<seq:020d>-<token>/chunk-<i:06d>
                                       one snapshot's data, in chunks of at most ``max_group_bytes``

Batch znode data (all integers little-endian)::

    offset  size  field
    0       8     first_seq   u64: seq of the batch's first record (the previous batch's last + 1)
    8       4     count       u32: number of records in the batch (>= 1)
    12      4     length      u32: bytes of record 1    } repeated count times
    16      len   record      the caller's opaque bytes  }

The batch is exactly as long as its records need: trailing bytes, a short
record or ``count`` disagreeing with the data raise ``LogCorrupted``. Its
encoding is at most ``max_group_bytes`` (900 KiB by default), because a znode
over ZooKeeper's ~1 MiB limit drops the connection instead of failing cleanly;
``append`` checks the size first and raises ``ValueError``.

Snapshot pointer (``snapshots/latest``), UTF-8 JSON::

    {"seq": 1234, "dir": "snap-00000000000000001234-3f2a9c1b07de", "chunks": 3,
     "size": 2097152, "crc32": 271828182}

``crc32`` is ``zlib.crc32`` of the whole snapshot data. A snapshot is written
as: its directory and chunks first (nobody looks at them yet), then the
pointer in one (fenced) transaction, which makes it visible atomically; only
then are the log batches wholly ``<= seq`` and the older snapshot directories
deleted. A batch that straddles ``seq`` is kept and its early records are
skipped on read. A crash between the steps leaves garbage that the next
writer's open deletes.

Appends and ZooKeeper failures
------------------------------

An append is one transaction: ``check(writer, v)`` (the lock is still ours:
our session is alive), with a fence also ``check(epoch, term)`` and
``check(election node, v)``, then ``create(log/batch-, sequence=True)``. A
failed check raises :class:`Fenced` and appends nothing. After a
``ConnectionLoss`` the outcome is unknown, and blindly retrying a sequential
create could write the batch twice: the log first re-reads the tail and
retries only if the batch did not land. Calls go through a ``KazooRetry``
that does *not* survive session expiry; what still fails (expiry, ZooKeeper
unreachable for longer than ``op_timeout``) raises ``Unavailable``. If that
leaves an append's outcome unknown, the next call re-reads the tail from
ZooKeeper before it trusts ``last_seq`` again.

Usage (the leader, then a hot-standby follower)::

    fence = Fence(epoch_version=term, election_node=election.node)
    with ZooKeeperEventLog(zk, "/croupier", fence=fence) as log:
        log.append([event1, event2])           # one znode, one transaction
        log.write_snapshot(log.last_seq(), state_bytes)

    view = ZooKeeperEventLog(zk, "/croupier", writer=False)
    view.watch(lambda: wake_up.set())          # on kazoo's thread: must not block
    for seq, record in view.read(after=folded_seq):
        ...
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import struct
import threading
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
)
from kazoo.retry import KazooRetry

from croupier.core.errors import NotLeader, Unavailable
from croupier.ha.eventlog import LogCorrupted, LogLocked, LogTruncated, _as_bytes, _check_snapshot_seq

__all__ = [
    "BATCH_PREFIX",
    "DEFAULT_MAX_GROUP_BYTES",
    "GROUP_HEADER",
    "RECORD_LENGTH",
    "Fence",
    "Fenced",
    "ZooKeeperEventLog",
    "decode_group",
    "encode_group",
]

log = logging.getLogger(__name__)

GROUP_HEADER = struct.Struct("<QI")
RECORD_LENGTH = struct.Struct("<I")
BATCH_PREFIX = "batch-"
DEFAULT_MAX_GROUP_BYTES = 900 * 1024
# ZooKeeper's jute.maxbuffer is 1 MiB - 1 for a whole request; leave room for the
# paths and checks that share the transaction.
_MAX_GROUP_BYTES_LIMIT = 1_000_000
_BATCH_NAME = re.compile(r"batch-(-?\d+)")
_SNAPSHOT_DIR = re.compile(r"snap-(\d{20})-[0-9a-f]+")
# How many reads are in flight at once when fetching many znodes.
_FETCH_WINDOW = 32


def encode_group(first_seq: int, records: Sequence[bytes]) -> bytes:
    """One batch znode's data: ``<QI`` first_seq and count, then ``<I`` length + bytes per record."""
    parts = [GROUP_HEADER.pack(first_seq, len(records))]
    for record in records:
        parts.append(RECORD_LENGTH.pack(len(record)))
        parts.append(record)
    return b"".join(parts)


def decode_group(data: bytes, path: str) -> tuple[int, list[bytes]]:
    """``(first_seq, records)`` of one batch znode.

    Raises:
        LogCorrupted: the data is not exactly one encoded group (``details["path"]`` names the znode).
    """
    if len(data) < GROUP_HEADER.size:
        raise _corrupted(
            path, f"batch is {len(data)} bytes, shorter than its {GROUP_HEADER.size}-byte header"
        )
    first_seq, count = GROUP_HEADER.unpack_from(data)
    if first_seq < 1:
        raise _corrupted(path, f"batch starts at seq {first_seq}; seqs start at 1")
    records: list[bytes] = []
    offset = GROUP_HEADER.size
    for i in range(count):
        if offset + RECORD_LENGTH.size > len(data):
            raise _corrupted(path, f"batch ends inside the length of record {i} of {count}")
        (length,) = RECORD_LENGTH.unpack_from(data, offset)
        offset += RECORD_LENGTH.size
        if offset + length > len(data):
            raise _corrupted(path, f"record {i} of {count} claims {length} bytes; the batch ends first")
        records.append(data[offset : offset + length])
        offset += length
    if offset != len(data):
        raise _corrupted(path, f"{len(data) - offset} bytes follow the last of the batch's {count} records")
    return first_seq, records


def _corrupted(path: str, why: str) -> LogCorrupted:
    return LogCorrupted(f"event log znode {path}: {why}", {"path": path})


def _counter(name: str) -> int:
    m = _BATCH_NAME.fullmatch(name)
    assert m is not None, name
    return int(m[1])


@dataclass(frozen=True)
class Fence:
    """What a leader's writes are fenced by: the term it set and the election node it won with.

    Parameters:
        epoch_version: the version of ``<root>/epoch`` after the leader bumped it (its term).
        election_node: the full path of the leader's ephemeral election znode.
        election_version: that node's data version (0 unless someone set its data).
    """

    epoch_version: int
    election_node: str
    election_version: int = 0


class Fenced(NotLeader):
    """A fenced write failed: ``/epoch`` moved on, or the election or writer node is gone.

    This master was deposed (or its session expired); nothing of the write
    was applied. Step down; never retry the write.
    """


@dataclass(frozen=True)
class _Pointer:
    seq: int
    dir: str
    chunks: int
    size: int
    crc32: int


# Open writers in this process, to refuse a second open over the same client
# before asking ZooKeeper (whose ephemeral node cannot tell two logs of one session apart).
_OPEN_WRITERS: weakref.WeakSet[ZooKeeperEventLog] = weakref.WeakSet()
_OPEN_WRITERS_LOCK = threading.Lock()


class ZooKeeperEventLog:
    """The event log in ZooKeeper under ``root`` (see the module docstring for the layout).

    Parameters:
        zk: a started ``KazooClient``; the caller owns it (``close`` does not stop it).
        root: the ensemble's root path, e.g. ``"/croupier"``.
        fence: with one, every write also checks the leader's term and election node.
        writer: ``True`` takes the ``<root>/writer`` lock; ``False`` opens a read-only
            view (a follower folds the log through it; ``append`` raises ``NotLeader``).
        max_group_bytes: the largest encoded batch, and the snapshot chunk size.
        retry: the policy for every ZooKeeper call; it must not ignore session expiry.
        op_timeout: the longest wait for one ZooKeeper reply (kazoo would wait forever
            while the ensemble is unreachable).

    State:
        max_record_bytes: the largest record ``append`` accepts.
        max_batch_bytes: ``max_group_bytes``: a group within it by ``batch_bytes`` fits one znode.
        _last_seq / _last_counter: the newest record and batch counter known (the writer
            trusts them only while ``_uncertain`` is false).
        _snap_seq / _snap_dir: the newest snapshot this writer knows of.
        _headers: ``(first_seq, count)`` per batch name already read (batches never change).
        _lock: serialises every method; reads fetch their records after releasing it.

    Raises:
        LogLocked: ``writer=True`` and another writer holds ``<root>/writer``.
        LogCorrupted: the batches are not consecutive, or one does not decode.
        Unavailable: ZooKeeper could not be reached.
    """

    def __init__(
        self,
        zk: Any,
        root: str,
        *,
        fence: Fence | None = None,
        writer: bool = True,
        max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
        retry: KazooRetry | None = None,
        op_timeout: float = 10.0,
    ) -> None:
        if not root.startswith("/"):
            raise ValueError(f"root must be an absolute znode path, not {root!r}")
        min_bytes = GROUP_HEADER.size + RECORD_LENGTH.size + 1
        if not min_bytes <= max_group_bytes <= _MAX_GROUP_BYTES_LIMIT:
            raise ValueError(
                f"max_group_bytes must be in {min_bytes}..{_MAX_GROUP_BYTES_LIMIT} (ZooKeeper's 1 MiB"
                f" request limit), not {max_group_bytes}"
            )
        self._zk = zk
        self.root = "/" + root.strip("/") if root.strip("/") else ""
        self.fence = fence
        self.writer = writer
        self.max_group_bytes = max_group_bytes
        self.max_record_bytes = max_group_bytes - GROUP_HEADER.size - RECORD_LENGTH.size
        # batch_bytes() counts 16 bytes a record, never less than the encoding's 12 a batch + 4 a record
        self.max_batch_bytes = max_group_bytes
        self.epoch_path = f"{self.root}/epoch"
        self.writer_path = f"{self.root}/writer"
        self.log_path = f"{self.root}/log"
        self.snapshots_path = f"{self.root}/snapshots"
        self.pointer_path = f"{self.snapshots_path}/latest"
        self._retry = retry or KazooRetry(max_tries=8, delay=0.05, max_delay=2.0, ignore_expire=False)
        self._op_timeout = op_timeout
        self._timeout_error: type[BaseException] = zk.handler.timeout_exception
        self._lock = threading.Lock()
        self._closed = False
        self._writer_version: int | None = None
        self._writer_token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}".encode()
        self._last_seq = 0
        self._last_counter = -1
        self._snap_seq: int | None = None
        self._snap_dir: str | None = None
        self._headers: dict[str, tuple[int, int]] = {}
        self._uncertain = False
        try:
            self._ensure_layout()
            if writer:
                self._take_writer()
            self._load()
        except BaseException:
            self._closed = True
            self._release_writer()
            raise

    # -- ZooKeeper calls ------------------------------------------------------------------------

    def _unavailable(self, what: str, exc: BaseException) -> Unavailable:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Unavailable(
            f"ZooKeeper event log {self.root or '/'}: cannot {what} ({reason})", {"root": self.root}
        )

    def _call(
        self, what: str, fn: Callable[..., Any], *args: Any, expected: tuple[type[BaseException], ...] = ()
    ) -> Any:
        """``fn(*args)`` (a kazoo ``*_async`` method) through the retry policy, waiting at most
        ``op_timeout`` per attempt; kazoo errors other than ``expected`` become ``Unavailable``."""

        def once() -> Any:
            return fn(*args).get(timeout=self._op_timeout)

        try:
            return self._retry.copy()(once)
        except expected:
            raise
        except (KazooException, self._timeout_error) as exc:
            raise self._unavailable(what, exc) from exc

    def _fetch_many(self, paths: Sequence[str], what: str) -> list[bytes | None]:
        """The data of every path (``None`` where the znode is gone), reads pipelined."""
        out: list[bytes | None] = []
        for start in range(0, len(paths), _FETCH_WINDOW):
            window = paths[start : start + _FETCH_WINDOW]
            pending = [self._zk.get_async(p) for p in window]
            for path, result in zip(window, pending, strict=True):
                try:
                    data, _stat = result.get(timeout=self._op_timeout)
                except NoNodeError:
                    out.append(None)
                    continue
                except (ConnectionLoss, OperationTimeoutError):
                    # one lost reply: fetch that znode again, with the retry policy
                    try:
                        data, _stat = self._call(what, self._zk.get_async, path, expected=(NoNodeError,))
                    except NoNodeError:
                        out.append(None)
                        continue
                except (KazooException, self._timeout_error) as exc:
                    raise self._unavailable(what, exc) from exc
                out.append(bytes(data))
        return out

    def _list_batches(self) -> list[str]:
        children = self._call(f"list {self.log_path}", self._zk.get_children_async, self.log_path)
        names = []
        for name in children:
            if _BATCH_NAME.fullmatch(name):
                names.append(name)
            else:
                log.warning("event log %s: ignoring unexpected znode %s", self.log_path, name)
        names.sort(key=_counter)
        return names

    def _read_pointer(self) -> _Pointer | None:
        data, _stat = self._call(f"read {self.pointer_path}", self._zk.get_async, self.pointer_path)
        if not data:
            return None
        try:
            raw = json.loads(data)
            pointer = _Pointer(
                seq=int(raw["seq"]),
                dir=str(raw["dir"]),
                chunks=int(raw["chunks"]),
                size=int(raw["size"]),
                crc32=int(raw["crc32"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise _corrupted(
                self.pointer_path, f"snapshot pointer is not valid JSON ({exc}): {data[:200]!r}"
            ) from exc
        if pointer.seq < 0 or pointer.chunks < 0 or not _SNAPSHOT_DIR.fullmatch(pointer.dir):
            raise _corrupted(self.pointer_path, f"snapshot pointer is invalid: {raw}")
        return pointer

    def _checks(self, tx: Any) -> list[str]:
        """Add the lock and fence checks to ``tx``; returns a description of each."""
        labels = []
        if self._writer_version is not None:
            tx.check(self.writer_path, self._writer_version)
            labels.append(
                f"the writer lock {self.writer_path} is no longer ours (the ZooKeeper session expired?)"
            )
        if self.fence is not None:
            tx.check(self.epoch_path, self.fence.epoch_version)
            labels.append(
                f"{self.epoch_path} is no longer at version {self.fence.epoch_version}:"
                " another master took over"
            )
            tx.check(self.fence.election_node, self.fence.election_version)
            labels.append(
                f"the election node {self.fence.election_node} is gone (session expired or withdrew)"
            )
        return labels

    def _commit(self, tx: Any, labels: list[str], what: str) -> list[Any]:
        """Commit ``tx`` once; a failed check raises ``Fenced``. Kazoo's ``commit`` does not
        raise for failed operations: the result list holds the errors."""
        results: list[Any] = tx.commit_async().get(timeout=self._op_timeout)
        for i, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                if i < len(labels):
                    raise Fenced(
                        f"this master was deposed: {labels[i]} ({type(result).__name__});"
                        f" {what} was not applied",
                        {"root": self.root},
                    )
                raise Unavailable(
                    f"ZooKeeper event log {self.root}: {what} failed ({type(result).__name__}: {result})",
                    {"root": self.root},
                )
        return results

    # -- opening ------------------------------------------------------------------------------

    def _ensure_layout(self) -> None:
        for path in (self.log_path, self.snapshots_path):
            self._call(f"create {path}", self._zk.ensure_path_async, path)
        with contextlib.suppress(NodeExistsError):
            self._call(
                f"create {self.pointer_path}",
                self._zk.create_async,
                self.pointer_path,
                b"",
                expected=(NodeExistsError,),
            )

    def _take_writer(self) -> None:
        with _OPEN_WRITERS_LOCK:
            for other in _OPEN_WRITERS:
                if other._zk is self._zk and other.writer_path == self.writer_path and not other._closed:
                    raise LogLocked(
                        f"event log {self.root} is already open for writing in this process; close it first",
                        {"root": self.root},
                    )
            _OPEN_WRITERS.add(self)
        for _ in range(3):
            try:
                self._call(
                    f"create {self.writer_path}",
                    self._zk.create_async,
                    self.writer_path,
                    self._writer_token,
                    None,
                    True,
                    expected=(NodeExistsError,),
                )
                self._writer_version = 0
                return
            except NodeExistsError:
                pass
            try:
                holder, stat = self._call(
                    f"read {self.writer_path}", self._zk.get_async, self.writer_path, expected=(NoNodeError,)
                )
            except NoNodeError:
                continue  # the holder just left: try again
            if holder == self._writer_token:
                self._writer_version = stat.version  # our create landed before a connection loss
                return
            client_id = self._zk.client_id
            if client_id is not None and stat.ephemeralOwner == client_id[0]:
                # Left by a log of this very session whose close could not reach ZooKeeper;
                # no open log holds it (checked above), so it is stale.
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._call(
                        f"delete {self.writer_path}",
                        self._zk.delete_async,
                        self.writer_path,
                        stat.version,
                        expected=(NoNodeError, BadVersionError),
                    )
                continue
            raise LogLocked(
                f"event log {self.root} is already open by writer {holder.decode(errors='replace')!r}"
                f" ({self.writer_path} exists until it closes or its ZooKeeper session expires)",
                {"root": self.root, "holder": holder.decode(errors="replace")},
            )
        raise LogLocked(f"event log {self.root}: the writer lock kept changing hands", {"root": self.root})

    def _release_writer(self) -> None:
        with _OPEN_WRITERS_LOCK:
            _OPEN_WRITERS.discard(self)
        version, self._writer_version = self._writer_version, None
        if version is None:
            return
        try:
            self._call(
                f"delete {self.writer_path}",
                self._zk.delete_async,
                self.writer_path,
                version,
                expected=(NoNodeError, BadVersionError),
            )
        except (NoNodeError, BadVersionError):
            pass  # gone with our session already, or someone else's by now
        except Unavailable as exc:
            # The ephemeral node goes with the session; reopening in this session takes it over.
            log.warning("event log %s: could not release %s: %s", self.root, self.writer_path, exc.message)

    def _scan(self) -> tuple[_Pointer | None, list[tuple[str, int, list[bytes]]]]:
        """A consistent ``(pointer, batches)``: listed first, pointer second (a batch deleted
        before the listing is always covered by the pointer read after it)."""
        for _ in range(5):
            names = self._list_batches()
            pointer = self._read_pointer()
            datas = self._fetch_many([f"{self.log_path}/{n}" for n in names], "read the log")
            if any(d is None for d in datas):
                continue  # a concurrent snapshot deleted some: look again
            batches = []
            for name, data in zip(names, datas, strict=True):
                assert data is not None
                first, records = decode_group(data, f"{self.log_path}/{name}")
                batches.append((name, first, records))
            return pointer, batches
        raise Unavailable(f"ZooKeeper event log {self.root}: the log kept changing while it was opened")

    def _load(self) -> None:
        pointer, batches = self._scan()
        base = pointer.seq if pointer else 0
        last, last_counter = base, -1
        live = False
        doomed = []
        for name, first, records in batches:
            path = f"{self.log_path}/{name}"
            end = first + len(records) - 1
            self._headers[name] = (first, len(records))
            last_counter = max(last_counter, _counter(name))
            if live:
                if first != last + 1:
                    raise _corrupted(path, f"batch starts at seq {first}; the previous one ends at {last}")
            elif end <= base:
                doomed.append(name)  # wholly in the snapshot: a crash came before its deletion
                continue
            elif first > base + 1:
                raise _corrupted(path, f"records {base + 1}..{first - 1} are missing before this batch")
            live = True
            last = end
        self._last_seq, self._last_counter = last, last_counter
        self._snap_seq = pointer.seq if pointer else None
        self._snap_dir = pointer.dir if pointer else None
        if self.writer:
            self._collect_garbage(doomed, keep_dir=self._snap_dir)

    def _collect_garbage(self, batches: list[str], keep_dir: str | None) -> None:
        """Delete ``batches`` and every snapshot directory but ``keep_dir``; failures only warn
        (the next writer's open deletes what is left)."""
        try:
            pending = [(n, self._zk.delete_async(f"{self.log_path}/{n}")) for n in batches]
            for name, result in pending:
                with contextlib.suppress(NoNodeError):
                    result.get(timeout=self._op_timeout)
                self._headers.pop(name, None)
            children = self._call(
                f"list {self.snapshots_path}", self._zk.get_children_async, self.snapshots_path
            )
            for child in children:
                if _SNAPSHOT_DIR.fullmatch(child) and child != keep_dir:
                    self._delete_tree(f"{self.snapshots_path}/{child}")
        except (KazooException, self._timeout_error, Unavailable) as exc:
            log.warning("event log %s: could not delete what a snapshot made redundant: %s", self.root, exc)

    def _delete_tree(self, path: str) -> None:
        try:
            chunks = self._call(f"list {path}", self._zk.get_children_async, path, expected=(NoNodeError,))
        except NoNodeError:
            return
        pending = [self._zk.delete_async(f"{path}/{c}") for c in chunks]
        for result in pending:
            with contextlib.suppress(NoNodeError):
                result.get(timeout=self._op_timeout)
        with contextlib.suppress(NoNodeError):
            self._call(f"delete {path}", self._zk.delete_async, path, expected=(NoNodeError,))

    # -- the port -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"the event log {self.root} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self.writer:
            raise NotLeader(
                f"event log {self.root} is a read-only view (writer=False); only the leader's writer appends",
                {"root": self.root},
            )
        if self._uncertain:
            self._resync()

    def _resync(self) -> None:
        """Re-read the tail after a write whose outcome is unknown (it may have landed)."""
        self._call(f"sync {self.log_path}", self._zk.sync_async, self.log_path)
        names = self._list_batches()
        pointer = self._read_pointer()
        self._snap_seq = pointer.seq if pointer else None
        self._snap_dir = pointer.dir if pointer else None
        last = pointer.seq if pointer else 0
        if names:
            newest = names[-1]
            (data,) = self._fetch_many([f"{self.log_path}/{newest}"], "read the log tail")
            if data is None:
                raise Unavailable(f"ZooKeeper event log {self.root}: the log tail changed while it was read")
            first, records = decode_group(data, f"{self.log_path}/{newest}")
            self._headers[newest] = (first, len(records))
            last = max(last, first + len(records) - 1)
            self._last_counter = _counter(newest)
        self._last_seq = last
        self._uncertain = False

    def append(self, records: Sequence[bytes]) -> int:
        """See :meth:`EventLog.append`: one znode, one transaction.

        Raises:
            ValueError: a record is over ``max_record_bytes``, or the group encodes to more
                than ``max_group_bytes`` (nothing is written).
            Fenced: the writer lock, the epoch or the election node check failed; nothing was written.
            NotLeader: this is a read-only view.
            Unavailable: ZooKeeper failed; the group may or may not be in the log (the next
                call re-reads the tail to find out).
        """
        group = [_as_bytes(r) for r in records]
        size = GROUP_HEADER.size
        for i, record in enumerate(group):
            if len(record) > self.max_record_bytes:
                raise ValueError(
                    f"record {i} of the group is {len(record)} bytes; the limit is {self.max_record_bytes}"
                    " for the ZooKeeper log"
                )
            size += RECORD_LENGTH.size + len(record)
        if size > self.max_group_bytes:
            raise ValueError(
                f"the group of {len(group)} records encodes to {size} bytes; the limit is"
                f" {self.max_group_bytes} (ZooKeeper's znode size): split it"
            )
        with self._lock:
            self._check_writable()
            if not group:
                return self._last_seq
            first = self._last_seq + 1
            data = encode_group(first, group)
            name = self._create_batch(first, data)
            self._headers[name] = (first, len(group))
            self._last_counter = _counter(name)
            self._last_seq = first + len(group) - 1
            return self._last_seq

    def _create_batch(self, first: int, data: bytes) -> str:
        in_doubt = False

        def attempt() -> str:
            nonlocal in_doubt
            if in_doubt:
                landed = self._find_landed(first, data)
                if landed is not None:
                    return landed
            in_doubt = True
            tx = self._zk.transaction()
            labels = self._checks(tx)
            tx.create(f"{self.log_path}/{BATCH_PREFIX}", data, sequence=True)
            results = self._commit(tx, labels, f"the append of records {first}..")
            path: str = results[-1]
            return path.rsplit("/", 1)[1]

        try:
            name: str = self._retry.copy()(attempt)
        except (KazooException, self._timeout_error) as exc:
            self._uncertain = True
            raise self._unavailable(f"append records from seq {first}", exc) from exc
        return name

    def _find_landed(self, first: int, data: bytes) -> str | None:
        """After a lost reply: the name of our batch if it landed, ``None`` if not."""
        self._zk.sync_async(self.log_path).get(timeout=self._op_timeout)
        children = self._zk.get_children_async(self.log_path).get(timeout=self._op_timeout)
        newer = sorted(
            (c for c in children if _BATCH_NAME.fullmatch(c) and _counter(c) > self._last_counter),
            key=_counter,
        )
        if not newer:
            return None
        try:
            got, _stat = self._zk.get_async(f"{self.log_path}/{newer[0]}").get(timeout=self._op_timeout)
        except NoNodeError:
            got = None
        if got == data:
            return str(newer[0])
        raise Fenced(
            f"this master was deposed: another writer appended {self.log_path}/{newer[0]} where records"
            f" from seq {first} were to go",
            {"root": self.root},
        )

    def read(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """See :meth:`EventLog.read`. Lists the batches now; fetches them as the iteration goes.

        Raises:
            LogTruncated: also mid-iteration, if a concurrent snapshot deleted a batch not yet read.
            LogCorrupted: a batch does not decode, or seqs are missing between batches.
            Unavailable: ZooKeeper failed.
        """
        if after < 0:
            raise ValueError(f"after must be >= 0, not {after}")
        with self._lock:
            self._check_open()
            names = self._list_batches()
            if self.writer and not self._uncertain:
                snap_seq = self._snap_seq or 0
            else:
                pointer = self._read_pointer()
                snap_seq = pointer.seq if pointer else 0
            if after < snap_seq:
                raise LogTruncated.of(after, snap_seq)
            plan = []
            for name in names:
                known = self._headers.get(name)
                if known is None or known[0] + known[1] - 1 > after:
                    plan.append(name)
        return self._iter_records(plan, after)

    def _iter_records(self, plan: list[str], after: int) -> Iterator[tuple[int, bytes]]:
        expected = after + 1
        for start in range(0, len(plan), _FETCH_WINDOW):
            window = plan[start : start + _FETCH_WINDOW]
            paths = [f"{self.log_path}/{n}" for n in window]
            for name, path, data in zip(window, paths, self._fetch_many(paths, "read the log"), strict=True):
                if data is None:
                    raise LogTruncated(
                        f"batch {path} was deleted by a snapshot while it was being read;"
                        " read again from the newest snapshot",
                        {"after": after, "path": path},
                    )
                first, records = decode_group(data, path)
                self._headers[name] = (first, len(records))
                end = first + len(records) - 1
                if end < expected:
                    continue  # wholly at or before `after`
                if first > expected:
                    raise _corrupted(path, f"records {expected}..{first - 1} are missing before this batch")
                for i in range(expected - first, len(records)):
                    yield first + i, records[i]
                expected = end + 1

    def last_seq(self) -> int:
        """See :meth:`EventLog.last_seq`. A view asks ZooKeeper (two or three reads) every time."""
        with self._lock:
            self._check_open()
            if self.writer:
                if self._uncertain:
                    self._resync()
                return self._last_seq
            for _ in range(5):
                names = self._list_batches()
                pointer = self._read_pointer()
                last = pointer.seq if pointer else 0
                if not names:
                    return last
                newest = names[-1]
                known = self._headers.get(newest)
                if known is None:
                    (data,) = self._fetch_many([f"{self.log_path}/{newest}"], "read the log tail")
                    if data is None:
                        continue  # deleted by a snapshot meanwhile
                    first, records = decode_group(data, f"{self.log_path}/{newest}")
                    known = self._headers[newest] = (first, len(records))
                return max(last, known[0] + known[1] - 1)
            raise Unavailable(f"ZooKeeper event log {self.root}: the log kept changing while it was read")

    def write_snapshot(self, seq: int, data: bytes) -> None:
        """See :meth:`EventLog.write_snapshot`: chunks, then the pointer (fenced), then cleanup.

        Raises:
            Fenced: the pointer's transaction failed its checks; the previous snapshot stands.
            Unavailable: ZooKeeper failed; the previous snapshot stands, or (if the
                pointer's reply was lost) the new one; the next call finds out.
        """
        data = _as_bytes(data)
        with self._lock:
            self._check_writable()
            _check_snapshot_seq(seq, self._last_seq, self._snap_seq or 0)
            name = f"snap-{seq:020d}-{uuid.uuid4().hex[:12]}"
            directory = f"{self.snapshots_path}/{name}"
            step = self.max_group_bytes
            chunks = [data[i : i + step] for i in range(0, len(data), step)]
            try:
                self._create_idempotent(directory, b"")
                self._create_chunks(directory, chunks)
            except BaseException:
                self._delete_tree_quietly(directory)
                raise
            pointer = json.dumps(
                {"seq": seq, "dir": name, "chunks": len(chunks), "size": len(data), "crc32": zlib.crc32(data)}
            ).encode()

            def attempt() -> None:
                tx = self._zk.transaction()
                labels = self._checks(tx)
                tx.set_data(self.pointer_path, pointer)
                self._commit(tx, labels, f"the snapshot at seq {seq}")

            try:
                self._retry.copy()(attempt)
            except Fenced:
                self._delete_tree_quietly(directory)
                raise
            except (KazooException, self._timeout_error) as exc:
                self._uncertain = True  # the pointer may have moved: re-read it before trusting _snap_seq
                raise self._unavailable(f"write the snapshot at seq {seq}", exc) from exc
            self._snap_seq, self._snap_dir = seq, name
            doomed = [n for n, (first, count) in self._headers.items() if first + count - 1 <= seq]
            self._collect_garbage(doomed, keep_dir=name)

    def _create_idempotent(self, path: str, value: bytes) -> None:
        # The path is unique to this snapshot: NodeExists after a retry means our create landed.
        with contextlib.suppress(NodeExistsError):
            self._call(f"create {path}", self._zk.create_async, path, value, expected=(NodeExistsError,))

    def _create_chunks(self, directory: str, chunks: list[bytes]) -> None:
        for start in range(0, len(chunks), _FETCH_WINDOW):
            window = list(enumerate(chunks))[start : start + _FETCH_WINDOW]
            pending = [(f"{directory}/chunk-{i:06d}", c) for i, c in window]
            results = [self._zk.create_async(path, chunk) for path, chunk in pending]
            for (path, chunk), result in zip(pending, results, strict=True):
                try:
                    result.get(timeout=self._op_timeout)
                except NodeExistsError:
                    pass
                except (ConnectionLoss, OperationTimeoutError):
                    self._create_idempotent(path, chunk)
                except (KazooException, self._timeout_error) as exc:
                    raise self._unavailable(f"write {path}", exc) from exc

    def _delete_tree_quietly(self, path: str) -> None:
        try:
            self._delete_tree(path)
        except (KazooException, self._timeout_error, Unavailable) as exc:
            log.warning("event log %s: could not delete the unused snapshot %s: %s", self.root, path, exc)

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """See :meth:`EventLog.latest_snapshot`. Reads the pointer and every chunk, and checks the crc.

        Raises:
            LogCorrupted: a chunk is missing, or the data does not match the pointer's size and crc.
            Unavailable: ZooKeeper failed.
        """
        with self._lock:
            self._check_open()
            previous: _Pointer | None = None
            while True:
                pointer = self._read_pointer()
                if pointer is None:
                    return None
                directory = f"{self.snapshots_path}/{pointer.dir}"
                paths = [f"{directory}/chunk-{i:06d}" for i in range(pointer.chunks)]
                chunks = self._fetch_many(paths, "read the snapshot")
                missing = [p for p, c in zip(paths, chunks, strict=True) if c is None]
                if missing:
                    if pointer != previous:
                        previous = pointer  # a newer snapshot may have replaced it: look again
                        continue
                    raise _corrupted(missing[0], f"snapshot chunk is missing (pointer {pointer})")
                data = b"".join(c for c in chunks if c is not None)
                if len(data) != pointer.size or zlib.crc32(data) != pointer.crc32:
                    raise _corrupted(
                        directory,
                        f"snapshot data ({len(data)} bytes, crc32 {zlib.crc32(data)}) does not match its"
                        f" pointer ({pointer.size} bytes, crc32 {pointer.crc32})",
                    )
                return pointer.seq, data

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever ``log/`` gains or loses batches (and once now).

        It runs on kazoo's thread and must not block: a follower only wakes its
        own thread, which then calls ``read``. Stops after ``close``.

        Raises:
            Unavailable: the watch could not be set.
        """
        with self._lock:
            self._check_open()

        def on_children(_children: list[str]) -> bool | None:
            if self._closed:
                return False  # tells kazoo to drop the watch
            try:
                callback()
            except Exception:
                log.exception("event log %s: watch callback failed", self.root)
            return None

        try:
            self._zk.ChildrenWatch(self.log_path, on_children)
        except (KazooException, self._timeout_error) as exc:
            raise self._unavailable(f"watch {self.log_path}", exc) from exc

    def close(self) -> None:
        """Release the writer lock (if held). Idempotent; the ``KazooClient`` stays open."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release_writer()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "writer" if self.writer else "view"
        state = "closed" if self._closed else f"last_seq={self._last_seq}"
        return f"<ZooKeeperEventLog {self.root or '/'} {role} {state}>"
