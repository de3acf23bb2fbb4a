"""``PartitionActor``: one per partition location (primary or replica copy) on a worker.

State it owns (on its pykka thread):
    pending     pieces accepted but not yet handed to the flusher (memory buffer)
    index       an ``IndexBuilder``: chunk boundaries, batch count and seals, in file order
    file        the ``PartitionFile``, created at the first flush
    in_flight   flush jobs handed to the disk's flusher and not yet done
    committed   the ``CommittedFile`` once committed

Hooks: ``Append`` from the push/replicate server threads; ``FlushDone`` from the
flusher; ``Commit`` from the control server thread. Bytes are released from the
worker's ``MemoryLimiter`` when their flush completes. The actor never waits on
another actor: commit completes when the last flush reports back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from croupier.actors.flusher import FlushDone, FlushJob
from croupier.core.batch import BATCH_HEADER, BatchHeader
from croupier.core.errors import CroupierError
from croupier.storage.index import IndexBuilder
from croupier.storage.store import CommittedFile, LocationKey, PartitionFile, PartitionStore
from croupier.transports.limiter import MemoryLimiter

__all__ = ["Append", "Commit", "CommitReport", "PartitionActor"]

log = logging.getLogger(__name__)

CommitReport = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Append:
    """Batches for this location, in order: (parsed header, header bytes, data); ``nbytes`` was acquired."""

    batches: list[tuple[BatchHeader, memoryview, memoryview]]
    nbytes: int


@dataclass(frozen=True, slots=True)
class Commit:
    reply: Callable[[CommitReport], None]


class PartitionActor(pykka.ThreadingActor):
    """Parameters:
    key: the location.
    store: where the file goes.
    flushers: one flusher actor per disk of the store.
    limiter: the worker's memory budget.
    flush_bytes: hand pending data to the flusher once this much is buffered.
    chunk_size: the target size of fetch chunks.
    """

    def __init__(
        self,
        key: LocationKey,
        store: PartitionStore,
        flushers: list[pykka.ActorRef[Any]],
        limiter: MemoryLimiter,
        *,
        flush_bytes: int = 4 * 1024 * 1024,
        chunk_size: int = 8 * 1024 * 1024,
    ) -> None:
        super().__init__()
        self.key = key
        self._store = store
        self._flushers = flushers
        self._limiter = limiter
        self._flush_bytes = flush_bytes
        self._index = IndexBuilder(chunk_size)
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0
        self._file: PartitionFile | None = None
        self._in_flight = 0
        self._unreleased = 0
        self._waiters: list[Callable[[CommitReport], None]] = []
        self.committed: CommittedFile | None = None
        self._error: CroupierError | None = None

    def on_receive(self, message: Any) -> Any:
        match message:
            case Append(batches, nbytes):
                self._append(batches, nbytes)
            case FlushDone(nbytes, error):
                self._in_flight -= 1
                self._unreleased -= nbytes
                self._limiter.release(nbytes)
                if error is not None and self._error is None:
                    self._error = error
                self._maybe_finish_commit()
            case Commit(reply):
                self._commit(reply)
            case _:
                log.warning("PartitionActor %s ignored %r", self.key.name, message)
        return None

    def on_stop(self) -> None:
        # a destroyed location gives its unflushed bytes back
        self._limiter.release(self._pending_bytes)
        self._pending.clear()
        self._pending_bytes = 0

    def _append(self, batches: list[tuple[BatchHeader, memoryview, memoryview]], nbytes: int) -> None:
        if self.committed is not None or self._waiters:
            # a late push (e.g. a losing speculative attempt): its data is not needed; give the bytes back
            log.info("%s is committed; dropping %d late batches", self.key.name, len(batches))
            self._limiter.release(nbytes)
            return
        for header, header_bytes, data in batches:
            self._index.add(header, BATCH_HEADER.size + len(data))
            self._pending.append(header_bytes)
            if len(data):
                self._pending.append(data)
        self._pending_bytes += nbytes
        if self._pending_bytes >= self._flush_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        try:
            if self._file is None:
                self._file = self._store.create(self.key)
        except CroupierError as exc:
            self._error = exc
            self._limiter.release(self._pending_bytes)
            self._pending, self._pending_bytes = [], 0
            return
        job = FlushJob(self._file, self._pending, self._pending_bytes, self.actor_ref)
        self._in_flight += 1
        self._unreleased += self._pending_bytes
        self._pending, self._pending_bytes = [], 0
        self._flushers[self._file.disk % len(self._flushers)].tell(job)

    def _commit(self, reply: Callable[[CommitReport], None]) -> None:
        if self.committed is not None or self._error is not None:
            reply(self._report())
            return
        self._waiters.append(reply)
        if len(self._waiters) == 1:
            self._flush()
        self._maybe_finish_commit()

    def _maybe_finish_commit(self) -> None:
        if not self._waiters or self._in_flight:
            return
        if self._error is None and self.committed is None:
            try:
                if self._file is None:
                    self._file = self._store.create(self.key)
                self.committed = self._file.commit(self._index.build())
            except CroupierError as exc:
                self._error = exc
        report = self._report()
        waiters, self._waiters = self._waiters, []
        for reply in waiters:
            reply(report)

    def _report(self) -> CommitReport:
        base: CommitReport = {
            "partition": self.key.partition,
            "epoch": self.key.epoch,
            "role": self.key.role,
        }
        if self._error is not None or self.committed is None:
            return {**base, "ok": False, "error": str(self._error or "not committed")}
        index = self.committed.index
        return {
            **base,
            "ok": True,
            "bytes": index.size,
            "batches": index.batches,
            "chunks": len(index.chunks),
            "seals": [list(s) for s in index.seals],
        }
