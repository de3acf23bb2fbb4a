"""Events: what happened to the cluster, in the past tense. The master's log holds them.

Each event is a frozen dataclass with a ``KIND`` name and a ``VERSION``. On the log
an event is one JSON object, never pickle::

    {"e": "MapperEnded", "v": 1, "app_id": "etl-1a2b", "shuffle_id": 0, ...}

Events are kept small (a znode holds ~1 MiB and shuffles may have 100,000+
partitions): ``ShuffleRegistered`` carries worker pairs plus the rule
``partition p -> pairs[p % len(pairs)]``; ``ShuffleCommitted`` lists only lost
copies and lost partitions. Anything that depended on time, randomness or load
when it was decided is written into the event, so replay never recomputes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from croupier.core.codec import OMITTED_WHEN_NONE, from_json, to_json
from croupier.core.errors import BadRequest
from croupier.core.wire import encode_body

__all__ = [
    "EVENT_TYPES",
    "AppExpired",
    "AppRegistered",
    "AppUnregistered",
    "CopiesOffloaded",
    "Event",
    "LeaderChanged",
    "MapperEnded",
    "MappersEnded",
    "MapsRerun",
    "PartitionRevived",
    "ShuffleCommitted",
    "ShuffleRegistered",
    "ShuffleUnregistered",
    "WorkerDecommissioning",
    "WorkerExcluded",
    "WorkerLost",
    "WorkerRegistered",
    "WorkerRemoved",
    "decode_event",
    "encode_event",
    "event_object",
]

Pair = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Event:
    """Base class. Subclasses set ``KIND`` and ``VERSION``.

    Events are written at ``VERSION``; any version from ``OLDEST`` on still decodes (a
    field added later has a default that means "not recorded").
    """

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    OLDEST: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class WorkerRegistered(Event):
    KIND = "WorkerRegistered"
    worker_id: str
    host: str
    control_port: int
    push_port: int
    replicate_port: int
    fetch_port: int
    slots: int
    incarnation: str
    at: float


@dataclass(frozen=True, slots=True)
class WorkerLost(Event):
    KIND = "WorkerLost"
    worker_id: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class WorkerExcluded(Event):
    KIND = "WorkerExcluded"
    worker_id: str
    excluded: bool
    reason: str


@dataclass(frozen=True, slots=True)
class WorkerDecommissioning(Event):
    KIND = "WorkerDecommissioning"
    worker_id: str


@dataclass(frozen=True, slots=True)
class WorkerRemoved(Event):
    KIND = "WorkerRemoved"
    worker_id: str


@dataclass(frozen=True, slots=True)
class AppRegistered(Event):
    """An app and its tenant. Version 2 adds ``tenant`` (version 1: ``"default"``); the
    tenant's token is never logged. Version 3 adds ``key_tag``: 16 hex digits drawn at
    random for this registration, which the app key is derived from with the id (PROTOCOL
    §2.1), so that a later registration of the same id gets another key (versions 1 and 2:
    ``""``, the key of the id alone). The key itself is never logged."""

    KIND = "AppRegistered"
    VERSION = 3
    app_id: str
    name: str
    at: float
    tenant: str = "default"
    key_tag: str = ""


@dataclass(frozen=True, slots=True)
class AppUnregistered(Event):
    KIND = "AppUnregistered"
    app_id: str


@dataclass(frozen=True, slots=True)
class AppExpired(Event):
    KIND = "AppExpired"
    app_id: str
    at: float


@dataclass(frozen=True, slots=True)
class ShuffleRegistered(Event):
    """A shuffle and the placement of every partition at epoch 0.

    Partition ``p`` lives on ``pairs[p % len(pairs)]`` (primary, replica-or-None).
    Version 2 adds ``request_id``: the client's id for the call, so a retry finds the shuffle.
    """

    KIND = "ShuffleRegistered"
    VERSION = 2
    app_id: str
    shuffle_id: int
    num_mappers: int
    num_partitions: int
    replicate: bool
    pairs: tuple[Pair, ...]
    at: float
    # (worker, incarnation) at placement: a copy on a worker that has since restarted lost its memory
    incarnations: tuple[tuple[str, str], ...] = ()
    request_id: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class PartitionRevived(Event):
    """A partition moved to a new location: ``epoch`` is the new epoch."""

    KIND = "PartitionRevived"
    app_id: str
    shuffle_id: int
    partition: int
    epoch: int
    primary: str
    replica: str | None
    reason: str
    incarnations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class MapperEnded(Event):
    """The winning attempt of a map: the first one logged.

    Version 2 adds ``partitions``, the base64 bitmap of the partitions it sealed
    (``croupier.core.bitmap``); a version-1 event has none (not declared).
    """

    KIND = "MapperEnded"
    VERSION = 2
    app_id: str
    shuffle_id: int
    map_id: int
    attempt_id: int
    touched: int
    partitions: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class MappersEnded(Event):
    """The winning attempts of several maps of one shuffle, in order: each as a
    ``MapperEnded`` would be, ``ends`` holding ``(map_id, attempt_id, touched, partitions)``
    (the winners of one ``MAPPER_END_BATCH``: one record instead of one per map)."""

    KIND = "MappersEnded"
    VERSION = 1
    app_id: str
    shuffle_id: int
    ends: tuple[tuple[int, int, int, str], ...]


@dataclass(frozen=True, slots=True)
class ShuffleCommitted(Event):
    """Commit outcome. Only failures are listed.

    ``lost_partitions`` cannot be read whole: every copy of some epoch failed, or a
    declared seal is in no surviving copy. Version 2 adds ``lost_maps``:
    ``(partition, lo, hi)`` says winning maps ``lo..hi-1`` declared the partition and
    their data there is gone. Version 3 adds ``empty_copies``: ``(partition, epoch, worker)``
    copies that did not fail and hold nothing (no batch was pushed to them), so nothing of
    them is offloaded.
    """

    KIND = "ShuffleCommitted"
    VERSION = 3
    app_id: str
    shuffle_id: int
    lost_copies: tuple[tuple[int, int, str], ...]  # (partition, epoch, worker)
    lost_partitions: tuple[int, ...]
    total_bytes: int
    total_batches: int
    at: float
    lost_maps: tuple[tuple[int, int, int], ...] = ()
    empty_copies: tuple[tuple[int, int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class MapsRerun(Event):
    """A committed shuffle reopened for new attempts of ``maps`` (``(lo, hi)`` ranges).

    Their winners are dropped, and ``refused`` (``(map, attempt)``: the winning attempts
    whose data was lost) may never win again; the commit is undone, and the shuffle commits
    anew once every map has ended. The new epochs follow as ``PartitionRevived`` events
    (reason ``"rerun"``) in the same decision.
    """

    KIND = "MapsRerun"
    app_id: str
    shuffle_id: int
    maps: tuple[tuple[int, int], ...]
    refused: tuple[tuple[int, int], ...]
    at: float


@dataclass(frozen=True, slots=True)
class CopiesOffloaded(Event):
    """A worker's committed copies are in the object store (issue 26), each
    ``(partition, epoch, role, size, blake3)``; their keys follow from these
    (``<app>/<shuffle>/<partition>-<epoch>-<role>.data`` and ``.index``)."""

    KIND = "CopiesOffloaded"
    worker_id: str
    app_id: str
    shuffle_id: int
    copies: tuple[tuple[int, int, str, int, str], ...]


@dataclass(frozen=True, slots=True)
class ShuffleUnregistered(Event):
    KIND = "ShuffleUnregistered"
    app_id: str
    shuffle_id: int


@dataclass(frozen=True, slots=True)
class LeaderChanged(Event):
    KIND = "LeaderChanged"
    term: int
    leader: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        WorkerRegistered,
        WorkerLost,
        WorkerExcluded,
        WorkerDecommissioning,
        WorkerRemoved,
        AppRegistered,
        AppUnregistered,
        AppExpired,
        ShuffleRegistered,
        PartitionRevived,
        MapperEnded,
        MappersEnded,
        ShuffleCommitted,
        ShuffleUnregistered,
        LeaderChanged,
        MapsRerun,
        CopiesOffloaded,
    )
}


def event_object(event: Event) -> dict[str, Any]:
    """One event as the JSON object that ``encode_event`` writes (for a faster encoder)."""
    if type(event) is MappersEnded:  # the hot one, whose fields are JSON as they are (a tuple is an array)
        return {
            "e": event.KIND,
            "v": event.VERSION,
            "app_id": event.app_id,
            "shuffle_id": event.shuffle_id,
            "ends": event.ends,
        }
    body: dict[str, Any] = {"e": event.KIND, "v": event.VERSION}
    body.update(to_json(event))
    return body


def encode_event(event: Event) -> bytes:
    """One event as compact JSON bytes."""
    body = event_object(event)
    return encode_body(body)


def decode_event(data: bytes | memoryview) -> Event:
    """Parse one event.

    Raises:
        BadRequest: not JSON, an unknown kind or version, or a field of the wrong shape.
    """
    try:
        raw = json.loads(bytes(data))
    except ValueError as exc:
        raise BadRequest(f"event is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise BadRequest("event must be a JSON object")
    kind = raw.pop("e", None)
    version = raw.pop("v", None)
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise BadRequest(f"unknown event kind {kind!r}")
    if type(version) is not int or not cls.OLDEST <= version <= cls.VERSION:
        raise BadRequest(f"unsupported version {version!r} of event {kind}")
    return from_json(cls, raw)
