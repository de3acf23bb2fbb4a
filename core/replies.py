"""The master's replies: one frozen dataclass per command (PROTOCOL §4).

``decide`` returns them, the master actor encodes them with
``croupier.core.codec.to_json`` and clients decode them with ``decode_reply``,
so both ends check the same shape. The JSON is the wire format: field names,
their order, nesting and the keys left out while ``None`` (``OMITTED_WHEN_NONE``)
are what PROTOCOL.md documents, and tests/core/test_replies.py pins them.

Pure values; no state, no threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from croupier.core.codec import OMITTED_WHEN_NONE, from_json
from croupier.core.enums import CopyRole, WorkerStatus
from croupier.core.errors import BadRequest, CroupierError, InternalError, error_from_wire
from croupier.core.proof import WinnerRuns

__all__ = [
    "AppHeartbeatReply",
    "AppRow",
    "ChangedReply",
    "DecommissionReply",
    "EndRefused",
    "LocationsBatchReply",
    "LocationsReply",
    "LostMapsReply",
    "MapperEndReply",
    "MapperEndsReply",
    "MasterInfo",
    "OffloadRow",
    "OffloadShuffleRow",
    "PartitionLocation",
    "PartitionLocations",
    "PingReply",
    "Ranges",
    "RegisterAppReply",
    "RegisterWorkerReply",
    "Reply",
    "RerunReply",
    "Revived",
    "ShuffleReadState",
    "ShuffleSummary",
    "StatusReply",
    "TakeOverReply",
    "TenantRow",
    "WinnerRunsWire",
    "WorkerAddress",
    "WorkerHeartbeatReply",
    "WorkerRow",
    "decode_reply",
    "mapper_end_results",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    """One worker's endpoints, as clients reach it.

    A worker the master no longer knows is only its id with status ``removed``:
    the other fields are then ``None`` and absent from the JSON.
    """

    worker_id: str
    host: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    control_port: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    push_port: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    replicate_port: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    fetch_port: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    incarnation: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    status: WorkerStatus = WorkerStatus.REMOVED

    @property
    def known(self) -> bool:
        """Whether the master still has an address for this worker."""
        return bool(self.host) and self.status != WorkerStatus.REMOVED

    # an unknown worker's URLs are "tcp://:0": invalid, so a push or fetch there fails at once
    @property
    def push_url(self) -> str:
        return f"tcp://{self.host or ''}:{self.push_port or 0}"

    @property
    def replicate_url(self) -> str:
        return f"tcp://{self.host or ''}:{self.replicate_port or 0}"

    @property
    def fetch_url(self) -> str:
        return f"tcp://{self.host or ''}:{self.fetch_port or 0}"


@dataclass(frozen=True, slots=True)
class PartitionLocation:
    """One epoch of a partition with its workers' addresses: a primary and an optional replica."""

    epoch: int
    primary: WorkerAddress
    replica: WorkerAddress | None

    @property
    def target(self) -> tuple[str, str | None, str | None, str | None]:
        """Pushes to locations with the same target may share one message."""
        r = self.replica
        return (
            self.primary.worker_id,
            self.primary.incarnation,
            r.worker_id if r else None,
            r.incarnation if r else None,
        )

    @property
    def workers(self) -> list[str]:
        return [self.primary.worker_id] + ([self.replica.worker_id] if self.replica else [])

    def copies(self) -> list[tuple[CopyRole, WorkerAddress]]:
        """Each copy's role and address, the primary first."""
        primary = (CopyRole.PRIMARY, self.primary)
        return [primary, (CopyRole.REPLICA, self.replica)] if self.replica else [primary]


# -- workers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterWorkerReply:
    """``worker_timeout``: the master's ``--worker-timeout`` in seconds (PROTOCOL §4): a worker
    beats at no more than a third of it. Added by the master after ``decide``."""

    worker_id: str
    incarnation: str
    worker_timeout: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class WorkerHeartbeatReply:
    """``unknown``: the request's ``held`` keys the master does not know (only sent with ``held``).
    ``worker_timeout``: as in ``RegisterWorkerReply`` (a new leader may say another one)."""

    status: WorkerStatus
    excluded: bool
    unknown: tuple[tuple[str, int], ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    worker_timeout: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class ChangedReply:
    """LOSE_WORKER, EXCLUDE_WORKER, UNREGISTER_APP, EXPIRE_APP, UNREGISTER_SHUFFLE: did state change?"""

    changed: bool


@dataclass(frozen=True, slots=True)
class DecommissionReply:
    changed: bool
    status: WorkerStatus


# -- apps ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterAppReply:
    """``app_key``: 64 hex digits, the app's key (batch digests, app requests), from a master with
    a cluster secret; absent from one without (PROTOCOL §4). The master adds it to each reply
    itself: it is never in the event log.

    ``key_tag``: the registration's key tag (``AppRegistered``), which the master derives
    ``app_key`` from; it takes it out of the reply before sending it.

    ``app_timeout``: the master's ``--app-timeout`` in seconds: a client heartbeats the app
    at no more than a third of it. Added by the master after ``decide``."""

    app_id: str
    name: str
    app_key: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    key_tag: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    app_timeout: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class AppHeartbeatReply:
    """``app_timeout``: as in ``RegisterAppReply`` (a new leader may say another one)."""

    app_id: str
    app_timeout: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)


# -- shuffles -----------------------------------------------------------------------------------

Revived = tuple[int, int, str, str | None]
"""``[partition, epoch, primary, replica]``: the current location of a revived partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleSummary:
    """REGISTER_SHUFFLE, GET_SHUFFLE and REPORT_COMMIT replies, and STATUS's ``shuffles``.

    ``workers`` (every worker of the shuffle -> its address) and ``revived``
    come first, and only in the replies writers build their routing from.
    """

    workers: dict[str, WorkerAddress] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    revived: tuple[Revived, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    app_id: str
    shuffle_id: int
    num_mappers: int
    num_partitions: int
    replicate: bool
    pairs: tuple[tuple[str, str | None], ...]
    revived_partitions: int
    mappers_ended: int
    committed: bool
    lost_partitions: tuple[int, ...]
    total_bytes: int


@dataclass(frozen=True, slots=True)
class MapperEndReply:
    winner: int
    won: bool
    all_ended: bool


@dataclass(frozen=True, slots=True)
class EndRefused:
    """The slot of a ``MAPPER_END_BATCH`` entry refused: the error its ``MAPPER_END`` would get."""

    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MapperEndsReply:
    """``MAPPER_END_BATCH``: one result per entry, in order (PROTOCOL §4)."""

    results: tuple[MapperEndReply | EndRefused, ...]


def mapper_end_results(body: Any, n: int) -> list[MapperEndReply | CroupierError]:
    """The ``n`` results of a ``MAPPER_END_BATCH`` reply, in the order of its entries: each a
    ``MapperEndReply``, or the error that entry's ``MAPPER_END`` would have got.

    Raises:
        InternalError: the body is not ``{"results": [...]}`` of ``n`` well-formed entries.
    """
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != n:
        raise InternalError(f"malformed reply from the master to MapperEndBatch: expected {n} results")
    out: list[MapperEndReply | CroupierError] = []
    for i, entry in enumerate(results):
        error = entry.get("error") if isinstance(entry, dict) else None
        if isinstance(error, dict) and isinstance(error.get("status"), int):
            out.append(error_from_wire(error["status"], error))
        else:
            out.append(decode_reply(MapperEndReply, entry, f"MapperEndBatch (entry {i})"))
    return out


Ranges = tuple[tuple[int, int], ...]
"""Sorted half-open ``[lo, hi)`` ranges of map ids."""


@dataclass(frozen=True, slots=True)
class PartitionLocations:
    """Every epoch of one partition, whether it is lost, and its copies that failed to commit.

    ``failed_copies`` holds ``[epoch, worker_id]`` pairs. ``maps`` ranges the winning
    maps that declared this partition at MAPPER_END (absent while some winner declared
    nothing: it ended before masters logged declarations). ``lost_maps`` ranges the
    declaring maps whose data here the commit found gone (absent when none).
    """

    partition: int
    locations: tuple[PartitionLocation, ...]
    lost: bool
    failed_copies: tuple[tuple[int, str], ...]
    maps: Ranges | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    lost_maps: Ranges | None = field(default=None, metadata=OMITTED_WHEN_NONE)


WinnerRunsWire = tuple[tuple[int, int, int], ...]
"""Sorted, disjoint, maximal ``[lo, hi, attempt]`` runs: maps ``lo..hi-1`` ended, won by ``attempt``."""


@dataclass(frozen=True, slots=True)
class ShuffleReadState:
    """What readers need besides locations.

    ``winner_runs`` holds the ended maps' winning attempts as runs, so that its size
    follows how often the winning attempt changes along the map ids, not ``num_mappers``
    (a committed shuffle whose maps all won with attempt 0 is ``[[0, num_mappers, 0]]``).
    ``winners`` looks a map up in it: ``winners[m]`` is map m's winning attempt, or -1.

    Raises:
        ValueError: runs that are not sorted, disjoint and within ``num_mappers``.
    """

    app_id: str
    shuffle_id: int
    num_mappers: int
    winner_runs: WinnerRunsWire
    committed: bool

    def __post_init__(self) -> None:
        _lookup(self.winner_runs, self.num_mappers)  # checks the runs

    @property
    def winners(self) -> WinnerRuns:
        """``winners[m]``: map m's winning attempt, or -1 (``len`` is ``num_mappers``)."""
        return _lookup(self.winner_runs, self.num_mappers)


_last_lookup: list[tuple[WinnerRunsWire, int, WinnerRuns]] = []


def _lookup(runs: WinnerRunsWire, num_mappers: int) -> WinnerRuns:
    """``WinnerRuns(runs, num_mappers)``, built once for the same tuple: a batch reply's
    entries share theirs, and each would otherwise check and index it again."""
    last = _last_lookup[-1] if _last_lookup else None
    if last is not None and last[0] is runs and last[1] == num_mappers:
        return last[2]
    lookup = WinnerRuns(runs, num_mappers)
    _last_lookup[:] = [(runs, num_mappers, lookup)]
    return lookup


@dataclass(frozen=True, slots=True)
class LocationsReply(ShuffleReadState):
    """GET_LOCATIONS and REVIVE_PARTITION: the read state and one partition's fields, flat."""

    partition: int
    locations: tuple[PartitionLocation, ...]
    lost: bool
    failed_copies: tuple[tuple[int, str], ...]
    maps: Ranges | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    lost_maps: Ranges | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @property
    def entry(self) -> PartitionLocations:
        """The partition's part, as a batch reply holds it."""
        return PartitionLocations(
            self.partition, self.locations, self.lost, self.failed_copies, self.maps, self.lost_maps
        )


@dataclass(frozen=True, slots=True)
class LocationsBatchReply(ShuffleReadState):
    """GET_LOCATIONS_BATCH: the read state once, then one entry per partition asked."""

    partitions: tuple[PartitionLocations, ...]

    def split(self) -> list[LocationsReply]:
        """Each entry as the GET_LOCATIONS reply for its partition alone would carry it."""
        shared = (self.app_id, self.shuffle_id, self.num_mappers, self.winner_runs, self.committed)
        return [
            LocationsReply(*shared, e.partition, e.locations, e.lost, e.failed_copies, e.maps, e.lost_maps)
            for e in self.partitions
        ]


# -- admin and HA -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRow(WorkerAddress):
    """One worker in a STATUS reply: its address, then its slots."""

    slots: int
    used_slots: int
    excluded: bool


@dataclass(frozen=True, slots=True)
class AppRow:
    app_id: str
    name: str
    shuffles: int


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant in STATUS ``tenants``: its usage and its limits (a limit left out: unlimited)."""

    tenant: str
    apps: int
    shuffles: int
    partitions: int
    bytes_in_flight: int
    bytes_stored: int
    max_shuffles: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    max_partitions: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    max_bytes_in_flight: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    max_bytes_stored: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterInfo:
    """STATUS's ``master`` object: the answering master's role and soft state.

    The master actor fills what it knows (``role``, ``url``, ``log`` and,
    under HA, ``term``, from the service; the counters itself); the HA
    service adds ``leader`` and ``followers`` (or ``followers_error``). A
    follower answers with the ensemble fields, ``log`` and ``seq`` only.
    """

    role: str
    url: str
    log: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    term: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    seq: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    commands: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    log_groups: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    log_records: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    in_grace: bool | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    writable: bool | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    worker_heartbeat_age: dict[str, float] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    worker_load: dict[str, float] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # per worker, its last heartbeat's dirs: [path, free, total, reserve, healthy] each
    worker_dirs: dict[str, tuple[tuple[str, int, int, int, bool], ...]] | None = field(
        default=None, metadata=OMITTED_WHEN_NONE
    )
    worker_http: dict[str, int] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    http: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    leader: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    followers: tuple[str, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    followers_error: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class OffloadShuffleRow:
    """A committed shuffle whose copies are not all in the object store yet (issue 26)."""

    app_id: str
    shuffle_id: int
    committed_copies: int
    offloaded_copies: int
    pending_bytes: int  # an estimate: croupier.core.offload_progress
    lag_seconds: float  # since its commit


@dataclass(frozen=True, slots=True)
class OffloadRow:
    """STATUS's ``offload``: the object store's progress and lag (``croupier.core.offload_progress``)."""

    committed_copies: int
    offloaded_copies: int
    pending_copies: int
    pending_bytes: int
    oldest_pending_seconds: float
    shuffles: tuple[OffloadShuffleRow, ...]


@dataclass(frozen=True, slots=True)
class StatusReply:
    """STATUS: the durable state as admin sees it; ``master``, ``tenants`` (usage and
    quotas per tenant, ``croupier.core.quotas``) and, on a master run with an object store,
    ``offload`` (``croupier.core.offload_progress``) are added by the answering master."""

    term: int
    leader: str
    seq: int
    workers: tuple[WorkerRow, ...]
    apps: tuple[AppRow, ...]
    shuffles: tuple[ShuffleSummary, ...]
    master: MasterInfo | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    tenants: tuple[TenantRow, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    offload: OffloadRow | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, slots=True)
class TakeOverReply:
    term: int


@dataclass(frozen=True, slots=True)
class PingReply:
    """``time_us``: the master's clock, microseconds since the epoch (the unit of a nonce,
    PROTOCOL §2.1), so that a client can tell clock skew from a wrong key."""

    pong: bool
    term: int
    time_us: int = 0


@dataclass(frozen=True, slots=True)
class LostMapsReply:
    """GET_LOST_MAPS: ``lost`` holds ``(partition, lo, hi)``: winning maps ``lo..hi-1`` declared
    the partition and their data there is on no live, valid copy. ``suspect`` the same for
    copies whose workers restarted since (their files may be gone). ``rerunning``: ``(lo, hi)``
    maps reopened by a rerun that have not ended again; ``rerun``: every map ever rerun."""

    num_mappers: int
    committed: bool
    lost: tuple[tuple[int, int, int], ...]
    suspect: tuple[tuple[int, int, int], ...]
    rerunning: tuple[tuple[int, int], ...]
    rerun: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class RerunReply:
    """RERUN_MAPS: the maps reopened (``(lo, hi)`` ranges), the new epochs placed for them
    (``(partition, epoch)``), and ``started``: False when every map was already rerunning
    (a repeat: nothing logged)."""

    maps: tuple[tuple[int, int], ...]
    epochs: tuple[tuple[int, int], ...]
    started: bool


Reply = (
    LostMapsReply
    | RerunReply
    | RegisterWorkerReply
    | WorkerHeartbeatReply
    | ChangedReply
    | DecommissionReply
    | RegisterAppReply
    | AppHeartbeatReply
    | ShuffleSummary
    | MapperEndReply
    | MapperEndsReply
    | LocationsReply
    | LocationsBatchReply
    | StatusReply
    | TakeOverReply
    | PingReply
)


def decode_reply(cls: type[R], body: Any, command: str) -> R:
    """Check and build the reply ``body`` the master sent to ``command``.

    Raises:
        InternalError: the body does not have the shape of ``cls``; the message
            names the command and the field path (a master bug or a version skew).
    """
    try:
        return from_json(cls, body)
    except BadRequest as exc:
        raise InternalError(f"malformed reply from the master to {command}: {exc.message}") from exc
