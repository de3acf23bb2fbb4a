"""``PartitionActor``: owns a shard of a worker's partition locations (primary or replica copies).

A worker runs a fixed number of these (``WorkerConfig.partition_actors``); a
location belongs to the actor its key hashes to. With ``partition_actors=0`` each
location gets an actor of its own, the layout DESIGN §11 starts from.

State it owns, per location (a ``_Location``), on its pykka thread:
    pending     pieces accepted but not yet handed to the flusher (memory buffer)
    index       an ``IndexBuilder``: chunk boundaries, batch count and seals, in file order
    file        the ``PartitionFile``, created at the first flush
    in_flight   flush jobs handed to the disk's flusher and not yet done
    committed   the ``CommittedFile`` once committed (then only it and the key are kept)
    held        the held bytes of its distinct seals, taken from the limiter with their push

Disk failures (issue 15): the store already retried a failed write on every other healthy
dir. A flush that still fails *fails* the location: its file keeps the prefix that was
flushed (``durable``, the index of that prefix), its buffered bytes go back to the limiter,
the maps that had batches in the lost part are ``lost``, and ``Failures`` tells the push
handler, which refuses further pushes to it (PROTOCOL §5.2). At commit a failed location
commits its durable prefix. An ``Append`` with ``synced`` (a push that carries seals)
flushes its locations at once and calls ``synced`` with the ``(map, partition)`` pairs it
lost once those flushes are done: a seal is acknowledged only when its map's batches are
on disk here.

Hooks: ``Append`` from the push/replicate server threads; ``FlushDone`` from the
flusher; ``Commit`` from the control server thread; ``Drop`` when a shuffle is
destroyed. Bytes go back to the worker's ``MemoryLimiter`` when their flush
completes (the flusher releases them) or when their location is dropped; so do the
held bytes of its seals (``SEAL_BYTES`` each, taken with their push: a seal that is
already there gives them back at once). The actor never waits on another actor: a
commit completes when the location's last flush reports back.

Flush size (issue 25): a location hands its buffer to the flusher at ``flush_bytes`` (1 MiB
by default) while the worker's buffered bytes are low, and at ``FLUSH_FLOOR`` (256 KiB, or
``flush_bytes`` if smaller) once they pass ``PRESSURE`` of its memory cap. With ``O_DIRECT``
each flush job costs a write call, two thread hand-offs (to the flusher and back) and an
index snapshot whatever its size: at 256 KiB those fixed costs were about a seventh of the
workers' CPU per GiB. Under pressure the smaller size keeps what waits for a commit as it
was: only the bytes buffered while below ``PRESSURE`` can sit in buffers above the floor.

Why shards: one actor per location means one thread per location, and a push
message carrying batches for many partitions wakes one thread per partition. At
640 partitions that is ~430 threads per worker, and the thread hand-offs cost
more than the work (BENCHMARKS.md, "Issue 6, third round").
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pykka

from croupier.actors.flusher import FlushBatch, FlushDone, FlushGate, FlushJob
from croupier.core.batch import BATCH_HEADER, FLAG_SEAL, BatchHeader
from croupier.core.dataplane import LocationReport
from croupier.core.errors import CroupierError, Unavailable
from croupier.storage.index import IndexBuilder
from croupier.storage.limiter import SEAL_BYTES, MemoryLimiter
from croupier.storage.store import ChunkIndex, CommittedFile, LocationKey, PartitionFile, PartitionStore
from croupier.transports.log_context import key_fields

__all__ = [
    "FLUSH_FLOOR",
    "PRESSURE",
    "Append",
    "Batches",
    "Commit",
    "Drop",
    "Failures",
    "LostPairs",
    "PartitionActor",
    "SyncJoin",
    "committed_report",
    "shard_of",
]

log = logging.getLogger(__name__)

Batches = list[tuple[BatchHeader, memoryview, memoryview]]
LostPairs = list[tuple[int, int]]  # (map_id, partition)
Maps = set[tuple[int, int]]  # (map_id, attempt_id)

FLUSH_FLOOR = 256 * 1024  # the flush size once the worker's buffered bytes pass PRESSURE
PRESSURE = 1 / 8  # of the memory cap

_SPENT = IndexBuilder(1)  # the index builder of every committed location: never added to again


def committed_report(key: LocationKey, index: ChunkIndex) -> LocationReport:
    """The commit report of a committed copy: its size, batch and chunk counts and seals."""
    return LocationReport(
        key.partition,
        key.epoch,
        key.role,
        ok=True,
        bytes=index.size,
        batches=index.batches,
        chunks=len(index.chunks),
        seals=index.seals,
    )


def shard_of(key: LocationKey, shards: int) -> int:
    """The actor (``0..shards-1``) that owns ``key``: a location's copies of every epoch spread evenly."""
    return (key.partition * 7 + key.epoch * 3 + key.shuffle_id * 13 + len(key.app_id)) % shards


class Failures:
    """The worker's failed locations and, per location, the (map, attempt)s whose batches it
    lost. Written by the partition actors, read by the push handler (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lost: dict[LocationKey, frozenset[tuple[int, int]]] = {}

    def mark(self, key: LocationKey, lost: Iterable[tuple[int, int]]) -> None:
        with self._lock:
            self._lost[key] = self._lost.get(key, frozenset()) | frozenset(lost)

    def lost(self, key: LocationKey) -> frozenset[tuple[int, int]] | None:
        """The maps ``key`` lost, or None if it has not failed."""
        with self._lock:
            return self._lost.get(key)

    def forget(self, keys: Iterable[LocationKey]) -> None:
        with self._lock:
            for key in keys:
                self._lost.pop(key, None)

    def __len__(self) -> int:
        return len(self._lost)


class SyncJoin:
    """Calls ``done`` with every part's lost pairs once ``parts`` parts reported (any thread)."""

    def __init__(self, parts: int, done: Callable[[LostPairs], None]) -> None:
        self._lock = threading.Lock()
        self._left = parts
        self._lost: LostPairs = []
        self._done = done
        if parts == 0:
            done([])

    def part(self, lost: LostPairs) -> None:
        with self._lock:
            self._lost += lost
            self._left -= 1
            last = self._left == 0
        if last:
            self._done(self._lost)


@dataclass(frozen=True, slots=True)
class Append:
    """Batches for locations of this actor: per location, (parsed header, header bytes, data) in
    order, and the bytes acquired for them from the limiter. ``synced``: flush these locations
    now and report once they are on disk (see the module docstring)."""

    groups: list[tuple[LocationKey, Batches, int]]
    synced: SyncJoin | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """Seal and commit ``keys``; ``reply`` is called once per key, with its report."""

    keys: list[LocationKey]
    reply: Callable[[LocationReport], None]


@dataclass(frozen=True, slots=True)
class Drop:
    """Forget ``keys`` (their shuffle was destroyed) and give back their unflushed bytes."""

    keys: list[LocationKey]


class _Location:
    """One location's buffer, index and file. Used only on its actor's thread."""

    __slots__ = (
        "committed",
        "durable",
        "error",
        "failed",
        "file",
        "flights",
        "flusher",
        "gate",
        "held",
        "in_flight",
        "index",
        "key",
        "lost",
        "pending",
        "pending_bytes",
        "pending_maps",
        "syncs",
        "waiters",
    )

    def __init__(self, key: LocationKey, chunk_size: int) -> None:
        self.key = key
        self.index = IndexBuilder(chunk_size)
        self.pending: list[bytes | memoryview] = []
        self.pending_bytes = 0
        self.file: PartitionFile | None = None
        self.in_flight = 0
        self.waiters: list[Callable[[LocationReport], None]] = []
        self.committed: CommittedFile | None = None
        self.error: CroupierError | None = None
        self.held = 0
        self.flusher = 0  # every flush of the location goes to one flusher, in order
        self.gate = FlushGate()
        self.pending_maps: Maps = set()  # maps with batches in ``pending``
        self.flights: deque[tuple[ChunkIndex, Maps]] = deque()  # per job in flight: index after it, its maps
        self.durable: ChunkIndex | None = None  # the index of what was flushed
        self.failed = False  # a flush failed on every dir: only ``durable`` is kept
        self.lost: Maps = set()
        self.syncs: list[tuple[SyncJoin, Maps]] = []

    def lost_pairs(self, maps: Maps) -> LostPairs:
        """The (map, partition) pairs among ``maps`` whose batches this location lost."""
        gone = maps if self.error is not None else maps & self.lost
        return sorted({(m, self.key.partition) for m, _ in gone})

    def report(self) -> LocationReport:
        if self.error is not None or self.committed is None:
            k = self.key
            return LocationReport.failed(k.partition, k.epoch, k.role, str(self.error or "not committed"))
        return committed_report(self.key, self.committed.index)


class PartitionActor(pykka.ThreadingActor):
    """Parameters:
    store: where the files go.
    flushers: one flusher actor per disk of the store.
    limiter: the worker's memory budget.
    flush_bytes: hand a location's pending data to the flusher once this much is buffered
        (``FLUSH_FLOOR`` when that is smaller, once the limiter holds ``PRESSURE`` of its cap).
    chunk_size: the target size of fetch chunks.
    """

    def __init__(
        self,
        store: PartitionStore,
        flushers: list[pykka.ActorRef[Any]],
        limiter: MemoryLimiter,
        *,
        flush_bytes: int = 1024 * 1024,
        chunk_size: int = 8 * 1024 * 1024,
        failures: Failures | None = None,
    ) -> None:
        super().__init__()
        self._failures = failures if failures is not None else Failures()
        self._store = store
        self._flushers = flushers
        self._limiter = limiter
        self._flush_bytes = flush_bytes
        self._flush_floor = min(flush_bytes, FLUSH_FLOOR)
        self._pressure = int(limiter.cap * PRESSURE)
        self._chunk_size = chunk_size
        self._locations: dict[LocationKey, _Location] = {}
        self._outgoing: dict[int, list[FlushJob]] = {}  # flusher -> jobs, sent when a message is done

    @staticmethod
    def _create_actor_inbox() -> Any:  # pykka.ActorInbox (put, get, empty)
        # a C queue: pykka's default ``queue.Queue`` runs a Python ``Condition`` on every tell,
        # and the data path tells once per request and per flush (issue 25's profile: the
        # hand-offs were the largest share of the workers' interpreter time)
        return queue.SimpleQueue()

    def on_receive(self, message: Any) -> Any:
        match message:
            case Append(groups, synced):
                for key, batches, nbytes in groups:
                    self._append(key, batches, nbytes)
                if synced is not None:
                    self._sync(groups, synced)
            case FlushDone(done):
                for key, error in done:
                    self._flush_done(key, error)
            case Commit(keys, reply):
                for key in keys:
                    self._commit(key, reply)
            case Drop(keys):
                self._drop(keys)
            case _:
                log.warning("PartitionActor ignored %r", message)
        # the flushes one message started go to each flusher together
        for flusher, jobs in self._outgoing.items():
            self._flushers[flusher].tell(FlushBatch(jobs) if len(jobs) > 1 else jobs[0])
        self._outgoing.clear()
        return None

    def on_stop(self) -> None:
        # uncommitted locations give their unflushed bytes back
        self._drop(list(self._locations))

    def _append(self, key: LocationKey, batches: Batches, nbytes: int) -> None:
        loc = self._locations.get(key)
        if loc is None:
            loc = self._locations[key] = _Location(key, self._chunk_size)
        if loc.committed is not None or loc.waiters or loc.failed or loc.error is not None:
            # a late push (e.g. a losing speculative attempt): its data is not needed; or the
            # location failed (its push raced the failure): its data is lost. Give the bytes back
            log.info(
                "%s is committed or failed; dropping %d batches",
                key.name,
                len(batches),
                extra=key_fields(key),
            )
            seals = sum(header.flags & FLAG_SEAL for header, _, _ in batches)
            self._limiter.release(nbytes, held=seals * SEAL_BYTES)
            if loc.committed is None and not loc.waiters:
                maps = {(h.map_id, h.attempt_id) for h, _, _ in batches}
                loc.lost |= maps
                self._failures.mark(key, maps)
            return
        seals, kept = 0, loc.index.seal_count
        for header, header_bytes, data in batches:
            loc.index.add(header, BATCH_HEADER.size + len(data))
            loc.pending_maps.add((header.map_id, header.attempt_id))
            seals += header.flags & FLAG_SEAL
            loc.pending.append(header_bytes)
            if len(data):
                loc.pending.append(data)
        loc.pending_bytes += nbytes
        if seals:  # each seal was charged with its push; one already held gives it back
            kept = loc.index.seal_count - kept
            loc.held += kept * SEAL_BYTES
            if seals > kept:
                self._limiter.release(0, held=(seals - kept) * SEAL_BYTES)
        pending = loc.pending_bytes
        if pending >= self._flush_bytes or (
            pending >= self._flush_floor and self._limiter.used >= self._pressure
        ):
            self._flush(loc)

    def _flush(self, loc: _Location) -> None:
        if not loc.pending:
            return
        try:
            if loc.file is None:
                loc.file = self._store.create(loc.key)
                loc.flusher = loc.file.disk % len(self._flushers)
        except CroupierError as exc:
            loc.error = exc
            self._fail(loc, exc)
            return
        job = FlushJob(loc.file, loc.pending, loc.pending_bytes, self.actor_ref, loc.gate)
        loc.in_flight += 1
        loc.flights.append((loc.index.build(), loc.pending_maps))
        loc.pending, loc.pending_bytes, loc.pending_maps = [], 0, set()
        self._outgoing.setdefault(loc.flusher, []).append(job)

    def _fail(self, loc: _Location, error: CroupierError) -> None:
        """No dir takes the location's data: keep what was flushed, give back what was not."""
        log.error(
            "location %s/%s/%s failed: %s",
            *(loc.key.app_id, loc.key.shuffle_id, loc.key.name, error),
            extra=key_fields(loc.key),
        )
        loc.failed = True
        loc.lost |= loc.pending_maps
        self._limiter.release(loc.pending_bytes)
        loc.pending, loc.pending_bytes, loc.pending_maps = [], 0, set()
        self._failures.mark(loc.key, loc.lost)

    def _flush_done(self, key: LocationKey, error: CroupierError | None) -> None:
        loc = self._locations.get(key)
        if loc is None or not loc.flights:
            # dropped while its flush ran (the flusher released the bytes), and maybe made
            # again since by a late push: the job was not this location's
            return
        loc.in_flight -= 1
        index, maps = loc.flights.popleft()
        if error is None and not loc.failed:
            loc.durable = index
        else:
            if not loc.failed:
                self._fail(loc, error or Unavailable("an earlier flush failed"))
            loc.lost |= maps
            self._failures.mark(key, maps)
        if not loc.in_flight:
            self._settle(loc)
        self._maybe_finish_commit(loc)

    def _sync(self, groups: list[tuple[LocationKey, Batches, int]], synced: SyncJoin) -> None:
        """Flush the locations of a push that carries seals; report once they are on disk."""
        for key, batches, _ in groups:
            loc = self._locations.get(key)
            maps = {(h.map_id, h.attempt_id) for h, _, _ in batches}
            if loc is None or loc.committed is not None or loc.waiters:
                synced.part([])  # a late push to a committed location: nothing of it is needed
                continue
            self._flush(loc)
            if loc.in_flight:
                loc.syncs.append((synced, maps))
            else:
                synced.part(loc.lost_pairs(maps) if loc.failed or loc.error else [])

    def _settle(self, loc: _Location) -> None:
        """Nothing of ``loc`` is in flight: answer the pushes waiting for it to be on disk."""
        syncs, loc.syncs = loc.syncs, []
        for synced, maps in syncs:
            synced.part(loc.lost_pairs(maps) if loc.failed or loc.error else [])

    def _commit(self, key: LocationKey, reply: Callable[[LocationReport], None]) -> None:
        loc = self._locations.get(key)
        if loc is None:
            # admitted but never appended to (its push was refused as congested): commit it empty
            loc = self._locations[key] = _Location(key, self._chunk_size)
        if loc.committed is not None or loc.error is not None:
            reply(loc.report())
            return
        loc.waiters.append(reply)
        if len(loc.waiters) == 1:
            self._flush(loc)
        self._maybe_finish_commit(loc)

    def _maybe_finish_commit(self, loc: _Location) -> None:
        if not loc.waiters or loc.in_flight:
            return
        if loc.error is None and loc.committed is None:
            try:
                if loc.file is None:
                    loc.file = self._store.create(loc.key)
                # a failed location commits what it flushed before it failed
                index = (loc.durable or ChunkIndex()) if loc.failed else loc.index.build()
                loc.committed = loc.file.commit(index)
                # the committed index is all that is read from now on
                loc.file, loc.index = None, _SPENT
            except CroupierError as exc:
                loc.error = exc
        report = loc.report()
        waiters, loc.waiters = loc.waiters, []
        for reply in waiters:
            reply(report)

    def _drop(self, keys: Iterable[LocationKey]) -> None:
        for key in keys:
            loc = self._locations.pop(key, None)
            if loc is None:
                continue
            self._limiter.release(loc.pending_bytes, held=loc.held)
            loc.pending, loc.pending_bytes, loc.held = [], 0, 0
            self._failures.forget([key])
            self._settle(loc)
            if loc.waiters:
                loc.error = loc.error or Unavailable("the location was dropped before its commit ended")
                report = loc.report()
                for reply in loc.waiters:
                    reply(report)
                loc.waiters = []
