"""``PushHandler``: PUSH (from writers) and REPLICATE (from primaries).

A request is parsed and checked (frames against its batch list, then its incarnation,
then that the master placed every one of its locations here as this copy (``Reservations``),
then, for a PUSH, that its app is not throttled (``AppThrottle``), that none of its
locations is split hard (``SplitPolicy``: ``HARD_SPLIT``, nothing stored) and every batch's
digest; a REPLICATE's digests are not hashed again), then its bytes, the held state of
the locations it creates (``LOCATION_BYTES`` each) and of its seals (``SEAL_BYTES`` each) are taken from the
``MemoryLimiter`` and its locations admitted, all or nothing (or the request is
``CONGESTED`` and creates nothing), and its batches are told to the locations' actors.
The seals' held bytes go back when their location is dropped (``PartitionActor``).
A PUSH naming a replica is then forwarded unchanged as a REPLICATE, and acknowledged
only when the replica answered: both copies are in memory (write-ahead memory
replication, DESIGN §7). A PUSH whose locations reached the split threshold is stored
as any other, and its OK reply names them: ``{"soft_split": [[partition, epoch], ...]}``
(PROTOCOL §5.2); otherwise the reply is ``{}``.

Disk failures (issue 15): a request naming a location that failed here (``Failures``: no
dir took its data) is refused before anything is taken: ``DATA_LOST`` naming the
``(map, partition)`` pairs when a map of the request had batches there that were lost, else
``HARD_SPLIT``. A request that carries seals is answered only once its batches are on disk
here (and, for a PUSH with a replica, once the replica answered), unless the disks are
ample (``DiskRoom``: a failed flush can then always move to another directory): if this copy lost some of
the sealing maps' batches and the other copy does not hold them either, ``DATA_LOST``.

No state of its own. ``on_push`` runs on the push server thread, ``on_replicate`` on the
replicate server thread, and the replica's answer on the replicator's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from croupier.actors.partition_actor import Batches, Failures, LostPairs
from croupier.core.batch import BATCH_HEADER, FLAG_SEAL, BatchHeader
from croupier.core.codec import from_json
from croupier.core.dataplane import Push, ReplicaTarget, Replicate
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Congested, CroupierError, DataLostError, HardSplit, Unavailable
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.pushed import PushedBytes
from croupier.dataplane.reservations import Reservations
from croupier.dataplane.split import SplitPolicy
from croupier.dataplane.throttle import AppThrottle
from croupier.storage.limiter import SEAL_BYTES, MemoryLimiter
from croupier.storage.store import LocationKey
from croupier.transports.async_rpc import AsyncRpcClient, Callback
from croupier.transports.digest import AppKeys, digest_ok
from croupier.transports.rpc import Reply, Request, Responder
from croupier.transports.secret import AppTags, ClusterSecret

__all__ = ["Parsed", "PushHandler", "parse_batches", "verify_digests"]

Pair = tuple[int, int]  # (partition, epoch)


@dataclass(slots=True)
class Parsed:
    """A request's batches, grouped once per request by location.

    groups: per ``(partition, epoch)``, in the order of first appearance: (parsed header,
        header bytes, data) of each of its batches, in request order.
    sizes: per ``(partition, epoch)``, its batches' bytes (headers included).
    total: every batch's bytes (headers included): what the request holds in memory.
    seals: how many of its batches are seals.
    order: (parsed header, data) of every batch, in request order.
    """

    groups: dict[Pair, Batches]
    sizes: dict[Pair, int]
    total: int
    seals: int
    order: list[tuple[BatchHeader, memoryview]]


def parse_batches(request: Request, pairs: tuple[Pair, ...]) -> Parsed:
    """Match the payload frames to ``pairs``: frame 0 holds the headers, frame i+1 batch i's data.

    Raises:
        BadRequest: the frame count, the header frame's size or a batch's length does not match.
    """
    n = len(pairs)
    payloads = request.payloads
    if len(payloads) != n + 1:
        raise BadRequest(f"{n} batches need {n + 1} payload frames, got {len(payloads)}")
    headers = payloads[0]
    size = BATCH_HEADER.size
    if len(headers) != n * size:
        raise BadRequest(f"header frame is {len(headers)} bytes; {n} batches need {n * size}")
    groups: dict[Pair, Batches] = {}
    sizes: dict[Pair, int] = {}
    total = seals = 0
    order: list[tuple[BatchHeader, memoryview]] = []
    decode = BatchHeader.decode
    for i, pe in enumerate(pairs):
        at = i * size
        header = decode(headers, at)
        data = payloads[i + 1]
        length = len(data)
        if header.length != length:
            raise BadRequest(f"batch {i} says {header.length} bytes but its frame has {length}")
        group = groups.get(pe)
        if group is None:
            group = groups[pe] = []
            sizes[pe] = 0
        group.append((header, headers[at : at + size], data))
        order.append((header, data))
        sizes[pe] += size + length
        total += size + length
        seals += header.flags & FLAG_SEAL
    return Parsed(groups, sizes, total, seals, order)


def verify_digests(batches: Parsed, key: bytes | None = None) -> None:
    """Check every batch's digest against its bytes, keyed by the app key ``key`` when given
    (PROTOCOL §5.1): a batch made without the app's key is refused like a corrupt one.

    Raises:
        BadRequest: a batch's digest does not match; it names the batch.
    """
    for i, (header, data) in enumerate(batches.order):
        if not digest_ok(header, data, key):
            raise BadRequest(
                f"batch {i} (map {header.map_id} attempt {header.attempt_id} batch {header.batch_id})"
                " does not match its digest: nothing of this request was stored"
            )


class PushHandler:
    """Parameters:
    identity: this worker; requests for another incarnation are refused.
    locations: where admitted batches go.
    reservations: the locations placed here; a batch for any other refuses the request.
    limiter: the worker's memory budget; full means ``CONGESTED``.
    replicator: sends the REPLICATEs (started and stopped by the caller).
    pushed: counts the bytes taken as primary, for the tenants' bytes in flight.
    throttle: per-app push rates; a PUSH of a throttled app is ``CONGESTED`` (None: off).
    secret: the cluster secret: batch digests are checked keyed by each app's key, derived from
        it (cached per app, bounded); None (a worker built without one) checks them unkeyed.
    app_tags: the key tags of the apps' registrations (from RESERVE; None: keys of the ids alone).
    split: when a PUSH is split soft or hard (None: never).
    failures: the worker's failed locations (written by its partition actors).
    ample: whether the disks are ample (``DiskRoom``): then seals are answered from memory
        (None: never; every push with seals waits for its flush).
    """

    def __init__(
        self,
        identity: Identity,
        locations: Locations,
        reservations: Reservations,
        limiter: MemoryLimiter,
        replicator: AsyncRpcClient,
        pushed: PushedBytes | None = None,
        *,
        throttle: AppThrottle | None = None,
        secret: ClusterSecret | None = None,
        app_tags: AppTags | None = None,
        split: SplitPolicy | None = None,
        failures: Failures | None = None,
        ample: Callable[[], bool] | None = None,
    ) -> None:
        self._split = split
        self._failures = failures if failures is not None else Failures()
        self._ample = ample
        self._pushed = pushed
        self._identity = identity
        self._locations = locations
        self._reservations = reservations
        self._limiter = limiter
        self._replicator = replicator
        self._throttle = throttle
        self._app_keys = AppKeys(secret, app_tags)

    def on_push(self, request: Request, responder: Responder) -> None:
        """Take a PUSH into memory here, then forward it to its replica, if any."""
        push = from_json(Push, request.body)
        push.validate()
        # the shape first (BAD_REQUEST), then whether it is meant for this incarnation
        batches = parse_batches(request, push.batches)
        self._identity.check(push.incarnation)
        if push.replica is not None and push.replica.worker_id == self._identity.worker_id:
            raise BadRequest("the replica must be another worker")
        replica = None if push.replica is None else push.replica.worker_id
        url = None if push.replica is None else push.replica.url
        self._reservations.check_push(push.app_id, push.shuffle_id, batches.groups, replica, url)
        if self._throttle is not None:  # before the digests: a refusal costs little
            self._throttle.check(push.app_id)
        self._check_hard(push, batches)
        verify_digests(batches, self._app_keys.get(push.app_id))
        self._check_failed(push.app_id, push.shuffle_id, CopyRole.PRIMARY, batches)
        answer = (
            _SealAnswer(responder, self._identity.worker_id, push.replica) if self._sync(batches) else None
        )
        self._accept(push.app_id, push.shuffle_id, CopyRole.PRIMARY, batches, answer)
        if self._pushed is not None:
            self._pushed.add(push.app_id, push.shuffle_id, batches.total)
        if self._throttle is not None:
            self._throttle.record(push.app_id, batches.total)
        reply = self._soft_split(push.app_id, push.shuffle_id, batches)
        if push.replica is None:
            if answer is None:
                responder.ok(reply)
            else:
                answer.body(reply)
            return
        # the REPLICATE's body is the PUSH's, checked above, with the replica's incarnation: its
        # batch list is passed on as it was received (PROTOCOL §5.2)
        body = {
            "app_id": push.app_id,
            "shuffle_id": push.shuffle_id,
            "incarnation": push.replica.incarnation,
            "batches": request.body["batches"],
        }
        if answer is not None:
            answer.body(reply)
        done = answer.replicated if answer is not None else _answer(push.replica, responder, reply)
        # the received frames go on as they are: the batch headers (signed) and, by reference,
        # each batch's data (no copy, no hand-off to pyzmq's garbage collector)
        payloads, forward = _forwarded(request)
        self._replicator.send(push.replica.url, MsgType.REPLICATE, body, payloads, done, forward=forward)

    def _check_hard(self, push: Push, batches: Parsed) -> None:
        """Refuse the whole PUSH if a location of it must take no more data.

        Raises:
            HardSplit: naming those locations and why; nothing of the request is stored.
        """
        if self._split is None:
            return
        refused, reason = self._split.hard(push.app_id, push.shuffle_id, batches.groups)
        if refused:
            raise HardSplit(
                f"worker {self._identity.worker_id}: {reason}; revive partitions"
                f" {sorted({p for p, _ in refused})} and resend (nothing of this request was stored)",
                {"partitions": refused, "reason": reason},
            )

    def _soft_split(self, app_id: str, shuffle_id: int, batches: Parsed) -> dict[str, object]:
        """Count the stored bytes per location; the OK reply body (``soft_split`` when any
        location reached the threshold)."""
        if self._split is None:
            return {}
        over = self._split.taken(app_id, shuffle_id, batches.sizes)
        return {"soft_split": over} if over else {}

    def on_replicate(self, request: Request, responder: Responder) -> None:
        """Take a REPLICATE into memory here."""
        rep = from_json(Replicate, request.body)
        rep.validate()
        batches = parse_batches(request, rep.batches)
        self._identity.check(rep.incarnation)
        self._reservations.check_replicate(rep.app_id, rep.shuffle_id, batches.groups)
        # no digest is hashed again here: the primary checked every one before it forwarded
        # them, and the REPLICATE's MAC (a member's) covers the batch headers. A data frame
        # damaged on the way fails its digest at the reader, which then reads the primary's copy
        # (PROTOCOL §5.2; the second hash was 0.35 of the workers' CPU-s per GiB, issue 25)
        self._check_failed(rep.app_id, rep.shuffle_id, CopyRole.REPLICA, batches)
        answer = _SealAnswer(responder, self._identity.worker_id, None) if self._sync(batches) else None
        self._accept(rep.app_id, rep.shuffle_id, CopyRole.REPLICA, batches, answer)
        if answer is None:
            responder.ok({})
        else:
            answer.body({})

    def _sync(self, batches: Parsed) -> bool:
        """Whether this request is answered only once it is on disk: it carries seals, and the
        disks are not ample."""
        return bool(batches.seals) and (self._ample is None or not self._ample())

    def _check_failed(self, app_id: str, shuffle_id: int, role: str, batches: Parsed) -> None:
        """Refuse a request naming a failed location: DATA_LOST if it lost batches of the
        request's maps, else HARD_SPLIT."""
        if not len(self._failures):
            return
        failed: set[tuple[int, int]] = set()
        pairs: set[tuple[int, int]] = set()
        for (partition, epoch), group in batches.groups.items():
            lost = self._failures.lost(LocationKey(app_id, shuffle_id, partition, epoch, role))
            if lost is None:
                continue
            failed.add((partition, epoch))
            pairs.update((h.map_id, partition) for h, _, _ in group if (h.map_id, h.attempt_id) in lost)
        where = f"worker {self._identity.worker_id} ({role})"
        if pairs:
            raise _lost(sorted(pairs), self._identity.worker_id, f"{where}: the disk failed")
        if failed:
            reason = "no disk with room or health is left"
            # the split's form (PROTOCOL §3): [[partition, epoch]], what REVIVE_PARTITION takes
            raise HardSplit(
                f"{where}: partitions {sorted(p for p, _ in failed)} of shuffle {app_id}/{shuffle_id}"
                f" take no more data here ({reason}): revive them",
                {
                    "partitions": [[p, e] for p, e in sorted(failed)],
                    "reason": reason,
                    "failed_worker": self._identity.worker_id,
                },
            )

    def _accept(
        self,
        app_id: str,
        shuffle_id: int,
        role: str,
        batches: Parsed,
        answer: _SealAnswer | None = None,
    ) -> None:
        sizes = batches.sizes
        keyed = [
            (LocationKey(app_id, shuffle_id, pe[0], pe[1], role), group, sizes[pe])
            for pe, group in batches.groups.items()
        ]
        # the new locations' state and the seals' are held until the shuffle is destroyed
        held = batches.seals * SEAL_BYTES
        keys = [key for key, _, _ in keyed]
        if not self._locations.admit_all(keys, batches.total, held=held, replicate=role == CopyRole.REPLICA):
            raise Congested(
                f"worker {self._identity.worker_id} holds {self._limiter.used} of {self._limiter.cap}"
                f" bytes ({self._limiter.held} in the state of its locations); retry later"
            )
        synced = answer.synced if answer is not None else None
        unwanted = set(self._locations.deliver(keyed, synced=synced))
        if unwanted:
            gone = [(group, size) for key, group, size in keyed if key in unwanted]
            self._limiter.release(
                sum(size for _, size in gone),
                held=SEAL_BYTES * sum(h.flags & FLAG_SEAL for group, _ in gone for h, _, _ in group),
            )


def _forwarded(request: Request) -> tuple[list[memoryview], tuple[zmq.Frame, ...]]:
    """A request's payloads as they go on to the replica: the header frame as bytes to sign,
    and the data frames as received (by reference) when the request came from a socket."""
    if len(request.frames) == len(request.payloads) and request.frames:
        return request.payloads[:1], request.frames[1:]
    return request.payloads, ()


def _answer(replica: ReplicaTarget, responder: Responder, ok: dict[str, object]) -> Callback:
    """The PUSH's answer once its replica answered the REPLICATE: OK (with the body ``ok``),
    ``CONGESTED`` as the replica said, or ``UNAVAILABLE`` naming the replica so that the
    writer revives."""

    def replicated(reply: Reply | None, error: CroupierError | None) -> None:
        if error is None:
            responder.ok(ok)
        elif isinstance(error, Congested):
            responder.error(error)
        else:
            responder.error(
                Unavailable(
                    f"replication to {replica.worker_id} ({replica.url}) failed:"
                    f" {error.code}: {error.message}",
                    {"failed_worker": replica.worker_id},
                )
            )

    return replicated


def _lost(pairs: LostPairs, worker_id: str, context: str) -> DataLostError:
    return DataLostError.of(
        sorted({p for _, p in pairs}), [worker_id], context, maps=[list(x) for x in pairs]
    )


class _SealAnswer:
    """Answers a request that carries seals once this copy is on disk (``synced``) and, for a
    PUSH with a replica, the replica answered (``replicated``): any thread, in any order.

    The data is safe when either copy holds all of it: ``DATA_LOST`` only when this copy lost
    some and the replica did not answer OK (it also waited for its disk)."""

    def __init__(self, responder: Responder, worker_id: str, replica: ReplicaTarget | None) -> None:
        self._responder = responder
        self._worker_id = worker_id
        self._replica = replica
        self._lock = threading.Lock()
        self._left = (1 if replica is None else 2) + 1  # and the OK body, known once stored
        self._lost: LostPairs = []
        self._error: CroupierError | None = None
        self._ok: dict[str, object] = {}

    def synced(self, lost: LostPairs) -> None:
        with self._lock:
            self._lost = lost
        self._one_done()

    def replicated(self, reply: Reply | None, error: CroupierError | None) -> None:
        with self._lock:
            self._error = error
        self._one_done()

    def body(self, ok: dict[str, object]) -> None:
        """The OK reply's body (a soft split's names), once the request is stored."""
        with self._lock:
            self._ok = ok
        self._one_done()

    def _one_done(self) -> None:
        with self._lock:
            self._left -= 1
            last = not self._left
        if last:
            self._finish()

    def _finish(self) -> None:
        if self._lost and (self._replica is None or self._error is not None):
            self._responder.error(
                _lost(self._lost, self._worker_id, f"worker {self._worker_id}: the disk failed")
            )
        elif self._error is not None and not (isinstance(self._error, DataLostError) and self._replica):
            assert self._replica is not None
            _answer(self._replica, self._responder, self._ok)(None, self._error)
        else:
            self._responder.ok(self._ok)  # a replica that lost data it also holds here is not a loss
