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

Usage::

    committer = GroupCommitter(log, on_failure=reload)
    committer.start()
    committer.submit(records, done=lambda error: reply(error))
    committer.submit_snapshot(seq, data)
    committer.stop()
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
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
    snapshot: tuple[int, bytes] | None = None


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
        self._queue: queue.SimpleQueue[_Item | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._generation = 0
        self._failed_generation = -1
        self._lock = threading.Lock()
        self.groups = 0
        self.records = 0

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
        self._queue.put(_Item(self._generation, records, done))

    def submit_snapshot(self, seq: int, data: bytes) -> None:
        """Write a snapshot once every record queued before it is durable."""
        self._queue.put(_Item(self._generation, (), None, (seq, data)))

    # -- the committer thread ---------------------------------------------------------------
    def _run(self) -> None:
        following: _Item | object | None = None
        while True:
            first = following if following is not None else self._queue.get()
            if first is _STOP:
                break
            assert isinstance(first, _Item)
            batch, following = self._gather(first)
            self._commit(batch)

    def _gather(self, first: _Item) -> tuple[list[_Item], _Item | object | None]:
        """``first`` and what is already queued behind it: the group in "group commit".

        Returns the group, and what was taken from the queue but belongs after it (an item
        that would take the group past the log's ``max_batch_bytes``, or the stop signal).
        """
        batch = [first]
        count = len(first.records)
        size = batch_bytes(first.records)
        # a snapshot ends a group: it is written once everything before it is durable
        while count < self._max_events and batch[-1].snapshot is None:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                return batch, None
            if nxt is _STOP:
                return batch, nxt
            assert isinstance(nxt, _Item)
            more = batch_bytes(nxt.records)
            if size + more > self._max_bytes:
                return batch, nxt
            batch.append(nxt)
            count += len(nxt.records)
            size += more
        return batch, None

    def _commit(self, batch: list[_Item]) -> None:
        live = [item for item in batch if item.generation > self._failed_generation]
        dead = [item for item in batch if item.generation <= self._failed_generation]
        for item in dead:
            self._finish(item, Unavailable("the event log failed earlier; the master is reloading"))
        records = [r for item in live if item.snapshot is None for r in item.records]
        error: CroupierError | None = None
        try:
            if records:
                self._log.append(records)
                self.groups += 1
                self.records += len(records)
            for item in live:
                if item.snapshot is not None:
                    self._log.write_snapshot(*item.snapshot)
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
