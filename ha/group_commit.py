"""Group commit: many commands' events, one durable append.

The master's actor decides commands one by one and hands each one's encoded
events and its reply callback to the ``GroupCommitter``. The committer's thread
takes everything queued so far (up to ``max_events``, and never past the log's
``max_batch_bytes``: a command that does not fit starts the next group), appends
it to the event log in one call (one write + one fsync, or one ZooKeeper
transaction), and only then runs the callbacks, in order. Items with no events go through the same
queue, so a reply is never sent before the events of earlier commands are
durable (a read never shows state that a crash could take back).

If an append fails, every item of that group and every later item of the same
*generation* gets the error; the owner reloads its state from the log and
starts a new generation (``reset``). Nothing decided on top of lost events is
ever appended.

Within ``burst()``, items are held and queued together when it ends: one queue
operation and one wake-up of the committer's thread per burst of commands, not one per
command (the master decides a burst of requests read together, then leaves the block).

Usage::

    committer = GroupCommitter(log, on_failure=reload)
    committer.start()
    committer.submit(records, done=lambda error: reply(error))
    with committer.burst():
        committer.submit(records, done)
        committer.submit_snapshot(seq, data)
    committer.stop()

Threads: ``submit``, ``submit_snapshot`` and ``burst`` are called from the owner's thread
(the master actor's); ``reset`` from any; the rest runs on the committer's own thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from croupier.core.errors import CroupierError, Unavailable
from croupier.ha.eventlog import EventLog, batch_bytes

__all__ = ["Done", "GroupCommitter"]

log = logging.getLogger(__name__)

Done = Callable[[CroupierError | None], None]


@dataclass(slots=True)
class _Item:
    generation: int
    records: Sequence[bytes]
    done: Done | None
    snapshot: tuple[int, bytes | Callable[[], bytes]] | None = None


_STOP = object()


class GroupCommitter:
    """Owns one thread that appends queued groups to ``log``.

    State:
        generation: items stamped with an older generation than a failure are refused.

    Parameters:
        log: the event log (file, memory or ZooKeeper); its ``max_batch_bytes`` bounds a group.
        max_events: take no more commands into a group once it holds this many records.
        on_failure: called on the committer thread after a failed append, with the error.
    """

    def __init__(
        self,
        log: EventLog,
        *,
        max_events: int = 4096,
        on_failure: Callable[[CroupierError], None] | None = None,
        name: str = "group-commit",
    ) -> None:
        self._log = log
        self._max_events = max_events
        self._max_bytes = log.max_batch_bytes
        self._on_failure = on_failure
        self._queue: queue.SimpleQueue[_Item | list[_Item] | object] = queue.SimpleQueue()
        self._held: list[_Item] | None = None  # the items of the current burst (owner's thread)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._generation = 0
        self._failed_generation = -1
        self._lock = threading.Lock()
        self.groups = 0
        self.records = 0
        # the seq of the last record known durable: the log's answer to each append (the
        # owner sets it after loading); read on the owner's thread, so a plain int
        self.durable_seq = 0

    @property
    def generation(self) -> int:
        return self._generation

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Commit what is queued, then stop the thread. Idempotent."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def reset(self) -> None:
        """Start a new generation after the owner reloaded its state from the log."""
        with self._lock:
            self._generation += 1

    def submit(self, records: Sequence[bytes], done: Done | None) -> None:
        """Queue one command's records; ``done(None)`` runs once they are durable."""
        self._put(_Item(self._generation, records, done))

    def submit_parts(self, records: Sequence[bytes], done: Done | None) -> None:
        """Queue records that need not be durable together (``MappersEnded``s: each a set of
        winners on its own), as items of at most ``max_batch_bytes`` each, so that no group
        outgrows the log; ``done`` runs once the last is durable, or with the error of any
        (an item after a failed one is refused, not appended)."""
        part: list[bytes] = []
        size = 0
        for record in records:
            more = batch_bytes((record,))
            if part and size + more > self._max_bytes:
                self._put(_Item(self._generation, part, None))
                part, size = [], 0
            part.append(record)
            size += more
        self._put(_Item(self._generation, part, done))

    def submit_snapshot(self, seq: int, data: bytes | Callable[[], bytes]) -> None:
        """Write a snapshot once every record queued before it is durable; ``data`` may be a
        function that makes the bytes, called then on the committer's thread (it must not
        read state that the owner changes meanwhile)."""
        self._put(_Item(self._generation, (), None, (seq, data)))

    @contextlib.contextmanager
    def burst(self) -> Iterator[None]:
        """Hold what is submitted within, and queue it all at once when the block ends."""
        if self._held is not None:  # nested: the outer block queues it
            yield
            return
        held: list[_Item] = []
        self._held = held
        try:
            yield
        finally:
            self._held = None
            if held:
                self._queue.put(held)

    def _put(self, item: _Item) -> None:
        if self._held is not None:
            self._held.append(item)
        else:
            self._queue.put(item)

    # -- the committer thread ---------------------------------------------------------------
    def _run(self) -> None:
        backlog: deque[_Item] = deque()
        stopping = False
        while not stopping or backlog:
            if not backlog and not stopping:
                stopping = self._take(self._queue.get(), backlog)
            # everything queued meanwhile joins the backlog, which leaves in groups
            while not stopping:
                try:
                    got = self._queue.get_nowait()
                except queue.Empty:
                    break
                stopping = self._take(got, backlog)
            if backlog:
                self._commit(self._group(backlog))

    @staticmethod
    def _take(got: object, backlog: deque[_Item]) -> bool:
        """Add a queue entry (an item, or a burst's list of them) to ``backlog``; True: stop."""
        if got is _STOP:
            return True
        if isinstance(got, list):
            backlog.extend(got)
        else:
            assert isinstance(got, _Item)
            backlog.append(got)
        return False

    def _group(self, backlog: deque[_Item]) -> list[_Item]:
        """The next group of "group commit", taken from the front of ``backlog``: at most
        ``max_events`` records (one item at least), never past the log's ``max_batch_bytes``
        (but for a first item that is larger alone), and ending at a snapshot."""
        first = backlog.popleft()
        batch = [first]
        count = len(first.records)
        size = batch_bytes(first.records)
        # a snapshot ends a group: it is written once everything before it is durable
        while backlog and count < self._max_events and batch[-1].snapshot is None:
            more = batch_bytes(backlog[0].records)
            if size + more > self._max_bytes:
                break
            batch.append(backlog.popleft())
            count += len(batch[-1].records)
            size += more
        return batch

    def _commit(self, batch: list[_Item]) -> None:
        live = [item for item in batch if item.generation > self._failed_generation]
        dead = [item for item in batch if item.generation <= self._failed_generation]
        for item in dead:
            self._finish(item, Unavailable("the event log failed earlier; the master is reloading"))
        records = [r for item in live if item.snapshot is None for r in item.records]
        error: CroupierError | None = None
        try:
            if records:
                self.durable_seq = self._log.append(records)
                self.groups += 1
                self.records += len(records)
            for item in live:
                if item.snapshot is not None:
                    seq, data = item.snapshot
                    self._log.write_snapshot(seq, data() if callable(data) else data)
        except CroupierError as exc:
            error = exc
        except Exception as exc:  # OSError, kazoo errors: translate at the boundary
            log.exception("event log append failed")
            error = Unavailable(f"event log append failed: {exc}")
        if error is not None:
            with self._lock:
                self._failed_generation = self._generation
            for item in live:
                self._finish(item, error)
            if self._on_failure is not None:
                self._on_failure(error)
            return
        for item in live:
            self._finish(item, None)

    @staticmethod
    def _finish(item: _Item, error: CroupierError | None) -> None:
        if item.done is None:
            return
        try:
            item.done(error)
        except Exception:
            log.exception("reply callback failed")
