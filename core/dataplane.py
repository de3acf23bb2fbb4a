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
- ``COMMIT_FILES`` and ``DESTROY`` (master -> control port).

Every request that names a location carries the worker's ``incarnation``; a
worker refuses another incarnation with ``STALE_LOCATION`` (DESIGN §10).
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.core.errors import BadRequest
from croupier.core.ids import app_id, int_id, worker_id
from croupier.core.wire import MsgType

__all__ = [
    "PRIMARY",
    "REPLICA",
    "CommitFiles",
    "Destroy",
    "FetchChunk",
    "OpenStream",
    "Push",
    "ReplicaTarget",
    "Replicate",
]

PRIMARY = "primary"
REPLICA = "replica"


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
            if not self.replica.url.startswith("tcp://"):
                raise BadRequest(f"replica url {self.replica.url!r} is not tcp://host:port")


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
    for p, e in body.batches:
        int_id("partition", p)
        int_id("epoch", e)


@dataclass(frozen=True, slots=True)
class CommitFiles:
    """Flush, close and index every location of the shuffle on this worker.

    Reply: ``{"incarnation", "locations": [{"partition", "epoch", "role", "ok",
    "error", "bytes", "batches", "chunks", "seals": [[map, attempt, count]]}]}``.
    """

    TYPE = MsgType.COMMIT_FILES
    app_id: str
    shuffle_id: int

    def validate(self) -> None:
        app_id(self.app_id)
        int_id("shuffle_id", self.shuffle_id)


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
    if body.role not in (PRIMARY, REPLICA):
        raise BadRequest(f"role must be {PRIMARY!r} or {REPLICA!r}")


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
