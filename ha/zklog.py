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

The batch znode's data and its codec: :mod:`croupier.ha.zkbatch`. The snapshot pointer
and chunks: :mod:`croupier.ha.zksnapshot`. The writer lock: :mod:`croupier.ha.zkwriter`.
The fence (``Fence``, ``Fenced``) and each write's checks: :mod:`croupier.ha.zkfence`. The
ZooKeeper calls (retries, timeouts, errors): :mod:`croupier.ha.zkcalls`.

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
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self

from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.retry import KazooRetry

from croupier.core.errors import NotLeader, Unavailable
from croupier.ha.eventlog import LogTruncated, _as_bytes, _check_snapshot_seq
from croupier.ha.zkbatch import (
    BATCH_NAME,
    BATCH_PREFIX,
    DEFAULT_MAX_GROUP_BYTES,
    GROUP_HEADER,
    RECORD_LENGTH,
    corrupted,
    counter,
    decode_group,
    encode_group,
)
from croupier.ha.zkcalls import FETCH_WINDOW, ZkCalls
from croupier.ha.zkfence import Fence, Fenced, add_checks
from croupier.ha.zksnapshot import (
    SNAPSHOT_DIR,
    SnapshotPointer,
    delete_quietly,
    read_pointer,
    read_snapshot,
    write_chunks,
)
from croupier.ha.zkwriter import WriterLock

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

# ZooKeeper's jute.maxbuffer is 1 MiB - 1 for a whole request; leave room for the
# paths and checks that share the transaction.
_MAX_GROUP_BYTES_LIMIT = 1_000_000


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
        retry = retry or KazooRetry(max_tries=8, delay=0.05, max_delay=2.0, ignore_expire=False)
        self._calls = ZkCalls(zk, self.root, retry, op_timeout)
        self._lock = threading.Lock()
        self._closed = False
        self._writer = WriterLock(self._calls, self.writer_path)
        self._last_seq = 0
        self._last_counter = -1
        self._snap_seq: int | None = None
        self._snap_dir: str | None = None
        self._headers: dict[str, tuple[int, int]] = {}
        self._uncertain = False
        try:
            self._ensure_layout()
            if writer:
                self._writer.take()
            self._load()
        except BaseException:
            self._closed = True
            self._release_writer()
            raise

    # -- ZooKeeper calls ------------------------------------------------------------------------

    def _list_batches(self) -> list[str]:
        children = self._calls.call(f"list {self.log_path}", self._zk.get_children_async, self.log_path)
        names = []
        for name in children:
            if BATCH_NAME.fullmatch(name):
                names.append(name)
            else:
                log.warning("event log %s: ignoring unexpected znode %s", self.log_path, name)
        names.sort(key=counter)
        return names

    def _read_pointer(self) -> SnapshotPointer | None:
        return read_pointer(self._calls, self.pointer_path)

    def _checks(self, tx: Any) -> list[str]:
        """Add the lock and fence checks to ``tx``; returns a description of each."""
        return add_checks(
            tx,
            self.fence,
            epoch_path=self.epoch_path,
            writer_path=self.writer_path,
            writer_version=self._writer.version,
        )

    # -- opening ------------------------------------------------------------------------------

    def _ensure_layout(self) -> None:
        for path in (self.log_path, self.snapshots_path):
            self._calls.call(f"create {path}", self._zk.ensure_path_async, path)
        with contextlib.suppress(NodeExistsError):
            self._calls.call(
                f"create {self.pointer_path}",
                self._zk.create_async,
                self.pointer_path,
                b"",
                expected=(NodeExistsError,),
            )

    def _scan(self) -> tuple[SnapshotPointer | None, list[tuple[str, int, list[bytes]]]]:
        """A consistent ``(pointer, batches)``: listed first, pointer second (a batch deleted
        before the listing is always covered by the pointer read after it)."""
        for _ in range(5):
            names = self._list_batches()
            pointer = self._read_pointer()
            datas = self._calls.fetch_many([f"{self.log_path}/{n}" for n in names], "read the log")
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
            last_counter = max(last_counter, counter(name))
            if live:
                if first != last + 1:
                    raise corrupted(path, f"batch starts at seq {first}; the previous one ends at {last}")
            elif end <= base:
                doomed.append(name)  # wholly in the snapshot: a crash came before its deletion
                continue
            elif first > base + 1:
                raise corrupted(path, f"records {base + 1}..{first - 1} are missing before this batch")
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
                    result.get(timeout=self._calls.op_timeout)
                self._headers.pop(name, None)
            children = self._calls.call(
                f"list {self.snapshots_path}", self._zk.get_children_async, self.snapshots_path
            )
            for child in children:
                if SNAPSHOT_DIR.fullmatch(child) and child != keep_dir:
                    self._calls.delete_tree(f"{self.snapshots_path}/{child}")
        except (KazooException, self._calls.timeout_error, Unavailable) as exc:
            log.warning("event log %s: could not delete what a snapshot made redundant: %s", self.root, exc)

    def _release_writer(self) -> None:
        self._writer.release()

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
        self._calls.call(f"sync {self.log_path}", self._zk.sync_async, self.log_path)
        names = self._list_batches()
        pointer = self._read_pointer()
        self._snap_seq = pointer.seq if pointer else None
        self._snap_dir = pointer.dir if pointer else None
        last = pointer.seq if pointer else 0
        if names:
            newest = names[-1]
            (data,) = self._calls.fetch_many([f"{self.log_path}/{newest}"], "read the log tail")
            if data is None:
                raise Unavailable(f"ZooKeeper event log {self.root}: the log tail changed while it was read")
            first, records = decode_group(data, f"{self.log_path}/{newest}")
            self._headers[newest] = (first, len(records))
            last = max(last, first + len(records) - 1)
            self._last_counter = counter(newest)
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
            self._last_counter = counter(name)
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
            results = self._calls.commit(tx, labels, f"the append of records {first}..")
            path: str = results[-1]
            return path.rsplit("/", 1)[1]

        try:
            name: str = self._calls.retry.copy()(attempt)
        except (KazooException, self._calls.timeout_error) as exc:
            self._uncertain = True
            raise self._calls.unavailable(f"append records from seq {first}", exc) from exc
        return name

    def _find_landed(self, first: int, data: bytes) -> str | None:
        """After a lost reply: the name of our batch if it landed, ``None`` if not."""
        self._zk.sync_async(self.log_path).get(timeout=self._calls.op_timeout)
        children = self._zk.get_children_async(self.log_path).get(timeout=self._calls.op_timeout)
        newer = sorted(
            (c for c in children if BATCH_NAME.fullmatch(c) and counter(c) > self._last_counter),
            key=counter,
        )
        if not newer:
            return None
        try:
            got, _stat = self._zk.get_async(f"{self.log_path}/{newer[0]}").get(timeout=self._calls.op_timeout)
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
        for start in range(0, len(plan), FETCH_WINDOW):
            window = plan[start : start + FETCH_WINDOW]
            paths = [f"{self.log_path}/{n}" for n in window]
            for name, path, data in zip(
                window, paths, self._calls.fetch_many(paths, "read the log"), strict=True
            ):
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
                    raise corrupted(path, f"records {expected}..{first - 1} are missing before this batch")
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
                    (data,) = self._calls.fetch_many([f"{self.log_path}/{newest}"], "read the log tail")
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
            name, pointer = write_chunks(self._calls, self.snapshots_path, seq, data, self.max_group_bytes)

            def attempt() -> None:
                tx = self._zk.transaction()
                labels = self._checks(tx)
                tx.set_data(self.pointer_path, pointer)
                self._calls.commit(tx, labels, f"the snapshot at seq {seq}")

            try:
                self._calls.retry.copy()(attempt)
            except Fenced:
                delete_quietly(self._calls, f"{self.snapshots_path}/{name}")
                raise
            except (KazooException, self._calls.timeout_error) as exc:
                self._uncertain = True  # the pointer may have moved: re-read it before trusting _snap_seq
                raise self._calls.unavailable(f"write the snapshot at seq {seq}", exc) from exc
            self._snap_seq, self._snap_dir = seq, name
            doomed = [n for n, (first, count) in self._headers.items() if first + count - 1 <= seq]
            self._collect_garbage(doomed, keep_dir=name)

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """See :meth:`EventLog.latest_snapshot`. Reads the pointer and every chunk, and checks the crc.

        Raises:
            LogCorrupted: a chunk is missing, or the data does not match the pointer's size and crc.
            Unavailable: ZooKeeper failed.
        """
        with self._lock:
            self._check_open()
            return read_snapshot(self._calls, self.snapshots_path, self.pointer_path)

    def watch(self, callback: Callable[[], bool | None]) -> None:
        """Call ``callback()`` whenever ``log/`` gains or loses batches (and once now).

        It runs on kazoo's thread and must not block: a follower only wakes its
        own thread, which then calls ``read``. Stops after ``close``, or once ``callback``
        returns False (each change lists ``log/`` again: a leader has no use for that).

        Raises:
            Unavailable: the watch could not be set.
        """
        with self._lock:
            self._check_open()

        def on_children(_children: list[str]) -> bool | None:
            if self._closed:
                return False  # tells kazoo to drop the watch
            try:
                if callback() is False:
                    return False
            except Exception:
                log.exception("event log %s: watch callback failed", self.root)
            return None

        try:
            self._zk.ChildrenWatch(self.log_path, on_children)
        except (KazooException, self._calls.timeout_error) as exc:
            raise self._calls.unavailable(f"watch {self.log_path}", exc) from exc

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
