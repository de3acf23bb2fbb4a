"""``FlusherActor``: one per disk; writes partition data sequentially (DESIGN §7.3).

State it owns: nothing but its thread and inbox. Each ``FlushJob`` names a
``PartitionFile`` and the pieces to append (batch headers and data, as memory
views of the received frames). Jobs for one file arrive in order from its
``PartitionActor`` and are written in order, so a file is only ever written by
this one thread. When a job is done (or failed) the flusher ``tell``s the
owning actor; it never waits on another actor. The job's bytes go back to the
worker's ``MemoryLimiter`` here, once written (or failed), so that they are
released even when their owner has gone.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from dataclasses import dataclass
from typing import Any

import pykka

from croupier.core.errors import CroupierError, Unavailable
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import LocationKey, PartitionFile
from croupier.transports.log_context import key_fields

__all__ = ["FlushBatch", "FlushDone", "FlushGate", "FlushJob", "FlushStats", "FlusherActor", "GetFlushStats"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FlushGate:
    """Shared by the jobs of one file: once one failed, the later ones are not written (they
    would leave a gap in the file) and fail too. Touched only by the file's flusher thread."""

    failed: bool = False


@dataclass(frozen=True, slots=True)
class FlushJob:
    file: PartitionFile
    pieces: list[bytes | memoryview]
    nbytes: int
    owner: pykka.ActorRef[Any]
    gate: FlushGate | None = None


@dataclass(slots=True)
class FlushStats:
    """What a flusher has done so far: written by its thread, read by anyone (heartbeats)."""

    busy_seconds: float = 0.0
    bytes_written: int = 0
    writes: int = 0  # flush jobs written (each a location's buffer, or its rest at commit)


@dataclass(frozen=True, slots=True)
class FlushBatch:
    """Jobs handed over together (one message, one thread hand-off); written in order."""

    jobs: list[FlushJob]


@dataclass(frozen=True, slots=True)
class FlushDone:
    """The jobs of one owner that a ``FlushBatch`` completed: (location, error or None) each."""

    done: list[tuple[LocationKey, CroupierError | None]]


@dataclass(frozen=True, slots=True)
class GetFlushStats:
    """Ask: the flusher's disk and ``FlushStats`` figures, as JSON values."""


class FlusherActor(pykka.ThreadingActor):
    """Sequential writer for one disk. Its ``stats`` feed the worker's disk-utilisation figure
    where the disk's own counters cannot be read."""

    def __init__(self, disk: int, limiter: MemoryLimiter, stats: FlushStats | None = None) -> None:
        super().__init__()
        self.disk = disk
        self._limiter = limiter
        self.stats = stats if stats is not None else FlushStats()

    @staticmethod
    def _create_actor_inbox() -> Any:  # pykka.ActorInbox (put, get, empty)
        # a C queue: pykka's default ``queue.Queue`` runs a Python ``Condition`` on every tell,
        # and the data path tells once per request and per flush (issue 25's profile: the
        # hand-offs were the largest share of the workers' interpreter time)
        return queue.SimpleQueue()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, FlushJob | FlushBatch):
            jobs = message.jobs if isinstance(message, FlushBatch) else [message]
            done: dict[int, tuple[pykka.ActorRef[Any], list[tuple[LocationKey, CroupierError | None]]]] = {}
            for job in jobs:
                error = self._write(job)
                done.setdefault(id(job.owner), (job.owner, []))[1].append((job.file.key, error))
            for owner, results in done.values():
                with contextlib.suppress(pykka.ActorDeadError):  # its owner stopped: nobody waits
                    owner.tell(FlushDone(results))
            return None
        if isinstance(message, GetFlushStats):
            return {
                "disk": self.disk,
                "busy_seconds": self.stats.busy_seconds,
                "bytes_written": self.stats.bytes_written,
                "writes": self.stats.writes,
            }
        log.warning("flusher ignored %r", message)
        return None

    def _write(self, job: FlushJob) -> CroupierError | None:
        started = time.perf_counter()
        error: CroupierError | None = None
        try:
            if job.gate is not None and job.gate.failed:
                raise Unavailable(f"flush of {job.file.key.name} skipped: an earlier flush of it failed")
            job.file.write(job.pieces)
            self.stats.bytes_written += job.nbytes
            self.stats.writes += 1
        except CroupierError as exc:
            error = exc
        except OSError as exc:
            error = Unavailable(f"flush of {job.file.key.name} failed: {exc}")
        if error is not None:
            log.error("disk %d: %s", self.disk, error, extra=key_fields(job.file.key))
            if job.gate is not None:
                job.gate.failed = True
        self.stats.busy_seconds += time.perf_counter() - started
        self._limiter.release(job.nbytes)
        return error
