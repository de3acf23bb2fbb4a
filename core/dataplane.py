"""Worker data-plane messages: push, replicate, commit, fetch, destroy.

Bodies are JSON (these dataclasses, checked by ``from_json``); batch bytes travel
as raw payload frames, never inside JSON:

- ``PUSH`` (client -> primary's push port) and ``REPLICATE`` (primary -> replica's
  replicate port): payload frame 0 is the batch headers back to back (36 bytes
  each, ``core/batch.py``); payload frames 1..n are each batch's data (empty for
  a seal). ``batches[i]`` is the ``[partition, epoch]`` of batch i. The reply is
  OK only when every batch is in memory on the primary **and** the replica.
- ``OPEN_STREAM`` (reader -> fetch port): the committed location's chunk table.
- ``FETCH_CHUNK`` (reader -> fetch port): payload frame 0 of the reply is the chunk.
- ``COMMIT_FILES``, ``DESTROY`` and ``RESERVE`` (master -> control port). ``RESERVE``
  tells a worker which locations of a shuffle the master placed on it, before any
  writer learns them; a worker takes PUSH and REPLICATE only for reserved locations.

Every OK reply body is one of the ``*Reply`` dataclasses below, sent as
``encode_reply(reply)`` and read back with ``from_json``, so a malformed reply is a
``BadRequest`` on the client as a malformed request is on the worker. PUSH and
REPLICATE answer ``{}``.

Every request that names a location carries the worker's ``incarnation``; a
worker refuses another incarnation with ``STALE_LOCATION`` (DESIGN §10).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from croupier.core.codec import OMITTED_WHEN_NONE, to_json
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest
from croupier.core.ids import app_id, int_id, worker_id
from croupier.core.urls import check_tcp_url
from croupier.core.wire import MsgType

__all__ = [
    "CommitFiles",
    "CommitFilesReply",
    "Destroy",
    "DestroyReply",
    "FetchChunk",
    "FetchChunkReply",
    "FetchSmall",
    "FetchSmallReply",
    "LocationReport",
    "OpenStream",
    "OpenStreamReply",
    "Push",
    "ReplicaTarget",
    "Replicate",
    "Reserve",
    "ReserveReply",
    "SmallLocation",
    "WorkerInfoReply",
    "WorkerReply",
    "check_key_tag",
    "encode_reply",
]


def _location(body: object) -> None:
    app_id(getattr(body, "app_id"))  # noqa: B009 - shared by several dataclasses
    int_id("shuffle_id", getattr(body, "shuffle_id"))  # noqa: B009
    worker_id(getattr(body, "incarnation"))  # noqa: B009


@dataclass(frozen=True, slots=True)
class ReplicaTarget:
    """Where the primary forwards a push: the replica's replicate endpoint."""

    worker_id: str
    url: str
    incarnation: str


@dataclass(frozen=True, slots=True)
class Push:
    TYPE = MsgType.PUSH
    app_id: str
    shuffle_id: int
    incarnation: str
    batches: tuple[tuple[int, int], ...]
    replica: ReplicaTarget | None = None

    def validate(self) -> None:
        _batches(self)
        if self.replica is not None:
            worker_id(self.replica.worker_id)
            worker_id(self.replica.incarnation)
            check_tcp_url(self.replica.url, "replica.url")


@dataclass(frozen=True, slots=True)
class Replicate:
    TYPE = MsgType.REPLICATE
    app_id: str
    shuffle_id: int
    incarnation: str
    batches: tuple[tuple[int, int], ...]

    def validate(self) -> None:
        _batches(self)


def _batches(body: Push | Replicate) -> None:
    """The checks PUSH and REPLICATE share: where the batches go."""
    _location(body)
    if not body.batches:
        raise BadRequest(f"a {type(body).__name__.lower()} carries at least one batch")
    for p, e in set(body.batches):  # each location once: a request has many batches per location
        int_id("partition", p)
        int_id("epoch", e)


@dataclass(frozen=True, slots=True)
class CommitFiles:
    """Flush, close and index every location of the shuffle on this worker.

    Reply: ``{"incarnation", "locations": [{"partition", "epoch", "role", "ok",
    "error", "bytes", "batches", "chunks", "seals": [[map, attempt, count]]}]}``.
    ``key_tag`` as in ``RESERVE``: a restarted worker that reports files it still has
    learns from it the key of the app that reads them.
    """

    TYPE = MsgType.COMMIT_FILES
    app_id: str
    shuffle_id: int
    key_tag: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        app_id(self.app_id)
        int_id("shuffle_id", self.shuffle_id)
        check_key_tag(self.key_tag)


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Reply: ``{"chunks": [[offset, length], ...], "bytes", "batches"}``.

    ``UNKNOWN_SHUFFLE`` means the worker never received data for the location
    (an empty partition), ``NOT_COMMITTED`` that it is not committed yet.
    """

    TYPE = MsgType.OPEN_STREAM
    app_id: str
    shuffle_id: int
    partition: int
    epoch: int
    role: str
    incarnation: str

    def validate(self) -> None:
        _stream(self)


def _stream(body: OpenStream | FetchChunk) -> None:
    """The checks OPEN_STREAM and FETCH_CHUNK share: one committed location copy."""
    _location(body)
    int_id("partition", body.partition)
    int_id("epoch", body.epoch)
    if body.role not in tuple(CopyRole):
        raise BadRequest(f"role must be one of {[str(r) for r in CopyRole]}")


@dataclass(frozen=True, slots=True)
class FetchChunk:
    """Reply: ``{"offset", "length"}`` and payload frame 0 = the chunk's bytes."""

    TYPE = MsgType.FETCH_CHUNK
    app_id: str
    shuffle_id: int
    partition: int
    epoch: int
    role: str
    incarnation: str
    chunk: int

    def validate(self) -> None:
        _stream(self)
        int_id("chunk", self.chunk)


MAX_FETCH_SMALL_LOCATIONS = 256  # locations one FETCH_SMALL may name
FETCH_SMALL_MAX_LOCATION = 1024**2  # a larger location is "skipped": read it with OPEN_STREAM
FETCH_SMALL_MAX_BYTES = 4 * 1024**2  # the payloads of one reply together (the first always fits)


@dataclass(frozen=True, slots=True)
class FetchSmall:
    """Many small committed location copies of one shuffle in one request.

    ``locations``: ``(partition, epoch, role)``, 1..``MAX_FETCH_SMALL_LOCATIONS``. Reply:
    ``FetchSmallReply``, one entry per location in order, and one payload frame (the whole
    ``.data`` file) per entry whose ``status`` is ``"ok"``.
    """

    TYPE = MsgType.FETCH_SMALL
    app_id: str
    shuffle_id: int
    incarnation: str
    locations: tuple[tuple[int, int, str], ...]

    def validate(self) -> None:
        _location(self)
        if not 1 <= len(self.locations) <= MAX_FETCH_SMALL_LOCATIONS:
            raise BadRequest(f"locations must name 1..{MAX_FETCH_SMALL_LOCATIONS} location copies")
        for partition, epoch, role in self.locations:
            int_id("partition", partition)
            int_id("epoch", epoch)
            if role not in tuple(CopyRole):
                raise BadRequest(f"role must be one of {[str(r) for r in CopyRole]}")


@dataclass(frozen=True, slots=True)
class Destroy:
    """Delete a shuffle's files (``shuffle_id`` set) or a whole app's. Reply: ``{"removed": n}``."""

    TYPE = MsgType.DESTROY
    app_id: str
    shuffle_id: int | None = None

    def validate(self) -> None:
        app_id(self.app_id)
        if self.shuffle_id is not None:
            int_id("shuffle_id", self.shuffle_id)


KEY_TAG_RE = re.compile(r"[0-9a-f]{16}")


def check_key_tag(tag: object) -> None:
    """A registration's app key tag: None (none) or 16 lowercase hex digits.

    Raises:
        BadRequest: anything else.
    """
    if tag is not None and not (isinstance(tag, str) and KEY_TAG_RE.fullmatch(tag)):
        raise BadRequest("key_tag must be 16 lowercase hex digits")


MAX_RESERVE_PARTITIONS = 1_000_000  # as a shuffle's num_partitions (core/commands.py)


@dataclass(frozen=True, slots=True)
class Reserve:
    """The locations of one shuffle that the master placed on this worker. Idempotent.

    ``pairs`` (the shuffle's epoch-0 placement, as in ``ShuffleRegistered``: partition
    ``p`` lives on ``pairs[p % len(pairs)]``) and/or ``revived`` (``(partition, epoch,
    primary, replica)`` of locations made by ``PartitionRevived``). ``incarnation`` is the
    worker's when the master placed them: another one is ``STALE_LOCATION``.
    ``replica`` is None exactly when ``replicate`` is false. ``peers``: ``(worker_id,
    replicate URL)`` of the replicas this worker forwards to, as registered with the
    master: a PUSH naming another URL for them is refused (a worker connects only where
    the master placed its peer). ``key_tag``: the key tag of the app's current registration
    (PROTOCOL §2.1), which the worker derives the app key from (absent: an app registered
    before tags, keyed by its id alone). Reply: ``ReserveReply``.
    """

    TYPE = MsgType.RESERVE
    app_id: str
    shuffle_id: int
    incarnation: str
    num_partitions: int
    replicate: bool
    pairs: tuple[tuple[str, str | None], ...] = ()
    revived: tuple[tuple[int, int, str, str | None], ...] = ()
    peers: tuple[tuple[str, str], ...] = ()
    key_tag: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        _location(self)
        check_key_tag(self.key_tag)
        if len(self.peers) > self.num_partitions:
            raise BadRequest(f"{len(self.peers)} peers for {self.num_partitions} partitions")
        for peer, url in self.peers:
            worker_id(peer)
            check_tcp_url(url, "peers url")
        if not 1 <= self.num_partitions <= MAX_RESERVE_PARTITIONS:
            raise BadRequest(f"num_partitions must be in 1..{MAX_RESERVE_PARTITIONS}")
        if not self.pairs and not self.revived:
            raise BadRequest("a reserve carries pairs, revived locations, or both")
        if len(self.pairs) > self.num_partitions:
            raise BadRequest(f"{len(self.pairs)} pairs for {self.num_partitions} partitions")
        for primary, replica in self.pairs:
            self._copies(primary, replica)
        for partition, epoch, primary, replica in self.revived:
            if not 0 <= partition < self.num_partitions:
                raise BadRequest(f"partition {partition} is out of range 0..{self.num_partitions - 1}")
            if int_id("epoch", epoch) == 0:
                raise BadRequest("a revived location has an epoch of 1 or more")
            self._copies(primary, replica)

    def _copies(self, primary: str, replica: str | None) -> None:
        worker_id(primary)
        if replica is None and self.replicate:
            raise BadRequest(f"a replicated shuffle's location on {primary} needs a replica")
        if replica is not None and not self.replicate:
            raise BadRequest(f"an unreplicated shuffle's location on {primary} names a replica")
        if replica is not None and worker_id(replica) == primary:
            raise BadRequest(f"primary and replica are both {primary}")


# -- replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocationReport:
    """One location copy's outcome in a ``COMMIT_FILES`` reply.

    A committed copy has ``ok`` and its ``bytes``, ``batches``, ``chunks`` (count) and
    ``seals`` (``(map, attempt, count)``); a failed one has ``error`` instead. A field
    that is None is left out of the JSON (``encode_reply``).
    """

    partition: int
    epoch: int
    role: str
    ok: bool
    error: str | None = None
    bytes: int | None = None
    batches: int | None = None
    chunks: int | None = None
    seals: tuple[tuple[int, int, int], ...] | None = None

    @classmethod
    def failed(cls, partition: int, epoch: int, role: str, error: str) -> LocationReport:
        """A copy that could not be committed, and why."""
        return cls(partition, epoch, role, ok=False, error=error)


@dataclass(frozen=True, slots=True)
class CommitFilesReply:
    """``COMMIT_FILES``: the worker's incarnation and a report per location copy it holds."""

    incarnation: str
    locations: tuple[LocationReport, ...]


@dataclass(frozen=True, slots=True)
class OpenStreamReply:
    """``OPEN_STREAM``: the committed copy's ``(offset, length)`` per chunk, its size and batch count."""

    chunks: tuple[tuple[int, int], ...]
    bytes: int
    batches: int


@dataclass(frozen=True, slots=True)
class FetchChunkReply:
    """``FETCH_CHUNK``: where the chunk lies in the file; payload frame 0 holds its ``length`` bytes."""

    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class SmallLocation:
    """One location of a ``FETCH_SMALL`` reply: ``status`` ``"ok"`` (with ``bytes``, the file's
    size and its payload frame's length, and ``batches``), ``"skipped"`` (too large for this
    reply: read it with OPEN_STREAM and FETCH_CHUNK), or the error code OPEN_STREAM would
    answer (``"UNKNOWN_SHUFFLE"``, ``"NOT_COMMITTED"``) with ``message``."""

    status: str
    bytes: int | None = None
    batches: int | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class FetchSmallReply:
    """``FETCH_SMALL``: an entry per location asked for, in order."""

    locations: tuple[SmallLocation, ...]


@dataclass(frozen=True, slots=True)
class DestroyReply:
    """``DESTROY``: how many location files were removed."""

    removed: int


@dataclass(frozen=True, slots=True)
class WorkerInfoReply:
    """``WORKER_INFO``: what the worker holds right now.

    ``urls`` maps each port's name (control, push, replicate, fetch) to its endpoint;
    ``congested`` counts the pushes refused as congested so far; ``disk_util`` and
    ``io_wait`` are the figures sent in the last heartbeat.
    """

    worker_id: str
    incarnation: str
    urls: dict[str, str]
    live_locations: int
    memory_used: int
    memory_peak: int
    memory_cap: int
    congested: int
    disk_util: float
    io_wait: float


@dataclass(frozen=True, slots=True)
class ReserveReply:
    """``RESERVE``: how many shuffles this worker holds reservations for now."""

    shuffles: int


WorkerReply = (
    ReserveReply
    | CommitFilesReply
    | OpenStreamReply
    | FetchChunkReply
    | FetchSmallReply
    | DestroyReply
    | WorkerInfoReply
)


def encode_reply(reply: WorkerReply) -> dict[str, Any]:
    """The JSON body of a worker reply: ``to_json``, without a location report's None fields."""
    body: dict[str, Any] = to_json(reply)
    if isinstance(reply, CommitFilesReply | FetchSmallReply):
        body["locations"] = [{k: v for k, v in loc.items() if v is not None} for loc in body["locations"]]
    return body
