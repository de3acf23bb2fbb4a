"""The writer's sender: per-worker windows, merging, retries and revives.

State (touched only by the writer's thread):
    staged     target (primary, replica) -> batches waiting to be sent together
    in_flight  primary worker id -> push messages sent and not settled (the window)
    delayed    congested messages waiting for their back-off to pass
    done       a queue of (message, reply, error) filled by the transport's callbacks

The transport runs callbacks on its own thread; they only put results on the
``done`` queue. Everything else (acks, resends, revives, which call the master)
happens on the writer's thread, inside ``submit``, ``flush`` and ``drain``. So a
``write`` blocks exactly when the window of the worker it needs is full.

Merging: a target's staged batches are sent at once when the worker has nothing
in flight, else once ``merge_size`` bytes are staged, so a busy worker gets few
large messages and an idle one gets no added latency.

Failures (DESIGN §7):
    ``CONGESTED``      resend the same message after an exponential back-off.
    ``STALE_LOCATION``, ``TIMEOUT``, ``UNAVAILABLE``, ``HARD_SPLIT``:
                       revive every partition of the message (unless someone
                       already moved it past the failed epoch) and resend its
                       batches, same ids, to the new location.
    ``HARD_SPLIT``     the same (nothing was stored), blaming no worker; these
                       revives count against ``max_split_revives``, not ``max_revives``.
    anything else      raised to the caller.

Soft splits (PROTOCOL §5.2): an OK reply with ``soft_split`` acks its batches as any
OK, and names locations over the worker's split threshold. Each such partition (unless
already moved past that epoch, or a soft revive of it is still running) is revived on a
background thread (``soft-split``, one per sender, ended by ``drain`` and ``abort``);
meanwhile batches keep going to the old epoch, and once the master answers, the routing
sends the following ones to the new epoch. A failed soft revive is only logged: the old
location still takes data, and its next reply asks again.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from croupier._accumulator import OutBatch
from croupier._routing import PartitionLocation, Routing
from croupier.core.codec import to_json
from croupier.core.dataplane import Push, ReplicaTarget
from croupier.core.errors import (
    Congested,
    CroupierError,
    HardSplit,
    InternalError,
    RequestTimeout,
    StaleLocation,
    Unavailable,
)
from croupier.core.wire import MsgType
from croupier.transports.rpc import Reply

__all__ = ["ReviveFn", "SendFn", "Sender"]

log = logging.getLogger(__name__)

Callback = Callable[[Reply | None, CroupierError | None], None]
SendFn = Callable[[str, int, dict[str, Any], Sequence[bytes | memoryview], Callback], None]
"""``send(url, msg_type, body, payloads, callback)``; the callback runs exactly once, on any thread."""
# (primary id, primary incarnation, replica id, replica incarnation): ``PartitionLocation.target``
_Target = tuple[str, str | None, str | None, str | None]
ReviveFn = Callable[[int, int, str, tuple[str, ...]], PartitionLocation]
"""``revive(partition, failed_epoch, reason, failed_workers) -> newest location``."""

REVIVE_ERRORS: tuple[type[CroupierError], ...] = (StaleLocation, RequestTimeout, Unavailable, HardSplit)
BACKOFF_MIN = 0.005
BACKOFF_MAX = 0.5


@dataclass(slots=True)
class _Staged:
    location: PartitionLocation
    batches: list[OutBatch] = field(default_factory=list)
    size: int = 0


@dataclass(slots=True)
class _Message:
    seq: int
    location: PartitionLocation
    entries: list[tuple[OutBatch, int]]  # (batch, epoch)
    body: dict[str, Any]
    payloads: list[bytes | memoryview]
    backoff: float = 0.0
    congested_since: float | None = None

    @property
    def worker(self) -> str:
        return self.location.primary.worker_id


class Sender:
    """Pushes batches to the current location of their partition, and sees them acked.

    Parameters:
        app_id, shuffle_id: written into every push.
        routing: the shuffle's locations (shared; updated here on revive).
        send: the transport (``AsyncRpcClient.send`` with a timeout bound in).
        revive: asks the master for a partition's next location.
        window: push messages in flight per worker.
        merge_size: staged bytes per target that trigger a send while the worker is busy.
        max_revives: revives of one partition after failures before giving up.
        max_split_revives: revives of one partition after ``HARD_SPLIT`` before giving up.
        stall_timeout: longest wait for any reply while pushes are in flight.
        congestion_timeout: longest a single message may stay congested.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        *,
        app_id: str,
        shuffle_id: int,
        routing: Routing,
        send: SendFn,
        revive: ReviveFn,
        window: int = 32,
        merge_size: int = 1024**2,
        max_revives: int = 5,
        max_split_revives: int = 100,
        stall_timeout: float = 120.0,
        congestion_timeout: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self._app_id = app_id
        self._shuffle_id = shuffle_id
        self._routing = routing
        self._send = send
        self._revive = revive
        self._window = window
        self._merge_size = merge_size
        self._max_revives = max_revives
        self._max_split_revives = max_split_revives
        self._split_revives: dict[int, int] = {}
        self._soft: dict[int, Future[None]] = {}
        self._soft_pool: ThreadPoolExecutor | None = None
        self._stall_timeout = stall_timeout
        self._congestion_timeout = congestion_timeout
        self._clock = clock
        self._done: queue.SimpleQueue[tuple[_Message, Reply | None, CroupierError | None]] = (
            queue.SimpleQueue()
        )
        self._staged: dict[_Target, _Staged] = {}
        self._in_flight: dict[str, int] = {}
        self._delayed: list[tuple[float, int, _Message]] = []
        self._seq = itertools.count()
        self._unacked = 0
        self._aborted = False
        self._revives: dict[int, int] = {}
        self._failed: dict[int, set[str]] = {}
        # counters, for tests and logs
        self.messages = 0
        self.bytes_sent = 0
        self.congested = 0
        self.revived = 0
        self.soft_splits = 0

    # -- public, writer thread --------------------------------------------------------------
    @property
    def unacked(self) -> int:
        """Batches submitted and not yet acked by primary and replica."""
        return self._unacked

    def in_flight(self, worker_id: str) -> int:
        return self._in_flight.get(worker_id, 0)

    def submit(self, batches: Iterable[OutBatch]) -> None:
        """Stage batches and send what is ready; block while a full target waits for its window.

        Raises:
            CroupierError: a push failed for good (see the module docstring).
        """
        for batch in batches:
            self._unacked += 1
            self._stage(batch)
        self.poll()
        while self._must_wait():
            self._wait_one()
            self._pump()

    def poll(self) -> None:
        """Settle whatever replies arrived, resend what is due, send what is ready (never blocks)."""
        self._settle_ready()
        self._pump()

    def flush(self) -> None:
        """Send everything staged, waiting for window room as needed."""
        self._pump(force=True)
        while self._staged:
            self._wait_one()
            self._pump(force=True)

    def drain(self) -> None:
        """Send everything and wait until every batch is acked."""
        self._pump(force=True)
        while self._unacked:
            self._wait_one()
            self._pump(force=True)
        self._end_soft_splits()

    def abort(self) -> None:
        """Drop everything not yet acked; late replies are ignored."""
        self._aborted = True
        self._staged.clear()
        self._delayed.clear()
        self._end_soft_splits()

    def _end_soft_splits(self) -> None:
        """Wait for the soft revives still running, and end their thread."""
        if self._soft_pool is not None:
            self._soft_pool.shutdown(wait=True, cancel_futures=True)
            self._soft_pool = None
        self._soft.clear()

    # -- staging and sending ----------------------------------------------------------------
    def _stage(self, batch: OutBatch) -> None:
        location = self._routing.current(batch.partition)
        staged = self._staged.get(location.target)
        if staged is None:
            staged = self._staged[location.target] = _Staged(location)
        staged.batches.append(batch)
        staged.size += batch.size

    def _must_wait(self) -> bool:
        """A target has a full message staged but no window room: memory would grow."""
        return any(
            st.size >= self._merge_size and self.in_flight(st.location.primary.worker_id) >= self._window
            for st in self._staged.values()
        )

    def _pump(self, *, force: bool = False) -> None:
        """Send every staged message that is ready, until nothing more can go."""
        progress = True
        while progress:
            progress = False
            for key in list(self._staged):
                staged = self._staged.get(key)
                if staged is None:
                    continue
                busy = self.in_flight(staged.location.primary.worker_id)
                if busy < self._window and (force or busy == 0 or staged.size >= self._merge_size):
                    self._send_staged(key, staged)
                    progress = True

    def _send_staged(self, key: _Target, staged: _Staged) -> None:
        """Send one message (up to ``merge_size``, or one bigger batch) from a target's staged batches."""
        cut = _cut_index(staged.batches, self._merge_size)
        taken = staged.batches[:cut]
        del staged.batches[:cut]
        size = sum(b.size for b in taken)
        staged.size -= size
        if not staged.batches:
            del self._staged[key]
        location = staged.location
        entries: list[tuple[OutBatch, int]] = []
        for batch in taken:
            current = self._routing.current(batch.partition)
            if current.target != key:
                # revived since it was staged (by another message's failure): route it anew
                self._stage(batch)
            else:
                entries.append((batch, current.epoch))
        if not entries:
            return
        message = self._message(location, entries)
        self._in_flight[message.worker] = self.in_flight(message.worker) + 1
        if not location.primary.known:
            self._settle(message, None, Unavailable(f"worker {message.worker} is no longer registered"))
            return
        self._transmit(message)

    def _message(self, location: PartitionLocation, entries: list[tuple[OutBatch, int]]) -> _Message:
        replica = location.replica
        body = to_json(
            Push(
                self._app_id,
                self._shuffle_id,
                location.primary.incarnation or "",  # unknown: settled before it is sent
                tuple((b.partition, epoch) for b, epoch in entries),
                ReplicaTarget(replica.worker_id, replica.replicate_url, replica.incarnation or "")
                if replica is not None
                else None,
            )
        )
        headers = b"".join(b.encoded_header for b, _ in entries)
        payloads = [headers, *(b.data for b, _ in entries)]
        return _Message(next(self._seq), location, entries, body, payloads)

    def _transmit(self, message: _Message) -> None:
        self.messages += 1
        self.bytes_sent += sum(b.size for b, _ in message.entries)
        done = self._done

        def callback(reply: Reply | None, error: CroupierError | None) -> None:
            done.put((message, reply, error))

        self._send(
            message.location.primary.push_url, int(MsgType.PUSH), message.body, message.payloads, callback
        )

    # -- replies ----------------------------------------------------------------------------
    def _wait_one(self) -> None:
        """Block until one reply arrives or a delayed message is due, then settle."""
        if not self._delayed and not any(self._in_flight.values()):
            raise InternalError(f"sender stalled: {self._unacked} batches unacked and nothing in flight")
        timeout = self._stall_timeout
        if self._delayed:
            timeout = max(0.0, min(timeout, self._delayed[0][0] - self._clock()))
        try:
            item = self._done.get(timeout=timeout)
        except queue.Empty:
            if not self._delayed:
                raise RequestTimeout(
                    f"no push reply within {self._stall_timeout:g} s ({self._unacked} batches unacked)"
                ) from None
        else:
            self._settle(*item)
        self._settle_ready()

    def _settle_ready(self) -> None:
        while True:
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                break
            self._settle(*item)
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, message = heapq.heappop(self._delayed)
            self._transmit(message)

    def _settle(self, message: _Message, reply: Reply | None, error: CroupierError | None) -> None:
        if self._aborted:
            return
        if isinstance(error, Congested):
            self._congested(message)
            return
        self._in_flight[message.worker] -= 1
        if error is None:
            self._unacked -= len(message.entries)
            split = reply.body.get("soft_split") if reply is not None else None
            if split:
                self._soft_split(message, split)
            return
        if isinstance(error, REVIVE_ERRORS):
            self._relocate(message, error)
            return
        raise error

    def _soft_split(self, message: _Message, split: object) -> None:
        """Revive in the background the partitions a worker says are over its threshold."""
        if not isinstance(split, list):
            return
        for item in split:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, int) for x in item)):
                continue
            partition, epoch = item
            running = self._soft.get(partition)
            if (running is not None and not running.done()) or self._routing.current(partition).epoch > epoch:
                continue
            if self._soft_pool is None:
                self._soft_pool = ThreadPoolExecutor(1, thread_name_prefix="soft-split")
            self.soft_splits += 1
            reason = (
                f"SOFT_SPLIT: {message.worker} holds its threshold of partition {partition} epoch {epoch}"
            )
            self._soft[partition] = self._soft_pool.submit(self._soft_revive, partition, epoch, reason)

    def _soft_revive(self, partition: int, epoch: int, reason: str) -> None:
        """On the soft-split thread: ask for the next epoch; the routing moves when it comes."""
        try:
            location = self._revive(partition, epoch, reason, ())
        except CroupierError as exc:  # the old location still takes data; its next reply asks again
            log.warning("soft split of partition %d epoch %d failed: %s", partition, epoch, exc)
            return
        if location.epoch > epoch:
            self._routing.update(partition, location)
            log.debug("partition %d split soft: epoch %d -> %d", partition, epoch, location.epoch)

    def _congested(self, message: _Message) -> None:
        """Keep the window slot and resend the same message after a back-off."""
        self.congested += 1
        now = self._clock()
        if message.congested_since is None:
            message.congested_since = now
        elif now - message.congested_since > self._congestion_timeout:
            raise Congested(
                f"worker {message.worker} stayed congested for {now - message.congested_since:.0f} s",
                {"worker": message.worker},
            )
        message.backoff = min(BACKOFF_MAX, max(BACKOFF_MIN, message.backoff * 2))
        heapq.heappush(self._delayed, (now + message.backoff, message.seq, message))

    def _relocate(self, message: _Message, error: CroupierError) -> None:
        """Revive the message's partitions (once per failed epoch) and restage its batches."""
        failed = _failed_workers(message.location, error)
        by_partition: dict[int, list[tuple[OutBatch, int]]] = {}
        for batch, epoch in message.entries:
            by_partition.setdefault(batch.partition, []).append((batch, epoch))
        named = _split_locations(error, message.entries)
        for partition, entries in by_partition.items():
            epoch = max(e for _, e in entries)
            if named is not None and not any((partition, e) in named for _, e in entries):
                for batch, _ in entries:  # not refused for itself: resent where it is
                    self._stage(batch)
                continue
            if not isinstance(error, HardSplit):  # a split worker did not fail
                self._failed.setdefault(partition, set()).update(message.location.workers)
            if self._routing.current(partition).epoch <= epoch:
                self._revive_partition(partition, epoch, error, failed)
            for batch, _ in entries:
                self._stage(batch)

    def _revive_partition(
        self, partition: int, epoch: int, error: CroupierError, failed: tuple[str, ...]
    ) -> None:
        counts, limit = (
            (self._split_revives, self._max_split_revives)
            if isinstance(error, HardSplit)
            else (self._revives, self._max_revives)
        )
        count = counts[partition] = counts.get(partition, 0) + 1
        workers = sorted(self._failed.get(partition, ()))
        if count > limit:
            raise Unavailable(
                f"shuffle {self._app_id}/{self._shuffle_id} partition {partition}: pushes failed after "
                f"{limit} revives (workers {workers}); last error: {error.code}: {error.message}",
                {"partition": partition, "workers": workers, "last_error": error.code},
            )
        log.info(
            "reviving %s/%d partition %d epoch %d after %s (failed workers %s)",
            self._app_id,
            self._shuffle_id,
            partition,
            epoch,
            error.code,
            list(failed),
        )
        location = self._revive(partition, epoch, f"{error.code}: {error.message}"[:200], failed)
        if location.epoch <= epoch:
            raise Unavailable(
                f"revive of partition {partition} returned epoch {location.epoch}, not past {epoch}"
            )
        self._routing.update(partition, location)
        self.revived += 1


def _cut_index(batches: list[OutBatch], room: int) -> int:
    """How many leading batches fit in ``room`` bytes (at least one)."""
    size = 0
    for i, batch in enumerate(batches):
        size += batch.size
        if size > room:
            return max(i, 1)
    return len(batches)


def _split_locations(
    error: CroupierError, entries: Iterable[tuple[OutBatch, int]]
) -> set[tuple[int, int]] | None:
    """The ``(partition, epoch)`` a ``HARD_SPLIT`` refused (``details.partitions``, PROTOCOL §3),
    or None to revive every partition of the message: another error, or a refusal naming
    none of the message's locations (an older worker's form named plain partitions)."""
    if not isinstance(error, HardSplit):
        return None
    named: set[tuple[int, int]] = set()
    listed = error.details.get("partitions")
    for item in listed if isinstance(listed, list) else ():
        if isinstance(item, list) and len(item) == 2 and all(type(x) is int for x in item):
            named.add((item[0], item[1]))
    if not any((batch.partition, epoch) in named for batch, epoch in entries):
        return None
    return named


def _failed_workers(location: PartitionLocation, error: CroupierError) -> tuple[str, ...]:
    """Which workers to avoid in the new location."""
    named = error.details.get("failed_worker")
    if isinstance(named, str) and named:
        return (named,)
    if isinstance(error, RequestTimeout | Unavailable):
        return (location.primary.worker_id,)
    return ()
