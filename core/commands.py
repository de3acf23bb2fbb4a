"""Commands: requests to the master, decided by ``croupier.core.decide``.

On the wire a command is the JSON body of a request whose header carries the
command's ``MsgType``; the body's fields are the dataclass fields below.
``decode_command`` checks the shape and the ids, and raises ``BadRequest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, ClassVar

from croupier.core.bitmap import bitmap_size, decode_bitmap
from croupier.core.codec import OMITTED_WHEN_NONE, from_json, to_json
from croupier.core.errors import BadRequest
from croupier.core.ids import app_id, int_id, text, worker_id
from croupier.core.urls import check_host, check_port, check_tcp_url
from croupier.core.wire import MsgType

__all__ = [
    "COMMAND_TYPES",
    "AppHeartbeat",
    "Command",
    "DecommissionWorker",
    "ExcludeWorker",
    "ExpireApp",
    "GetLocations",
    "GetLocationsBatch",
    "GetLostMaps",
    "GetShuffle",
    "LoseWorker",
    "MapperEnd",
    "MapperEndBatch",
    "Ping",
    "RegisterApp",
    "RegisterShuffle",
    "RegisterWorker",
    "ReportCommit",
    "ReportOffload",
    "RerunMaps",
    "RevivePartition",
    "Status",
    "TakeOver",
    "UnregisterApp",
    "UnregisterShuffle",
    "WorkerHeartbeat",
    "decode_command",
    "encode_command",
]

MAX_PARTITIONS = 1_000_000
MAX_MAPPERS = 10_000_000
MAX_PARTITIONS_PER_CALL = 10_000  # GetLocationsBatch
MAX_ENDS_PER_CALL = 1_000  # MapperEndBatch: map attempts per call
MAX_RERUN_MAPS = 100_000  # RerunMaps: map ids per call
MAX_HELD = 1_000  # WorkerHeartbeat.held: (app, shuffle) keys asked about per heartbeat
MAX_DIRS = 256  # WorkerHeartbeat.dirs: data directories reported per heartbeat
DirReport = tuple[str, int, int, int, bool]  # path, free, total, reserve (bytes), healthy


@dataclass(frozen=True, slots=True)
class Command:
    """Base class. ``TYPE`` is the header's msg_type; ``WRITES`` says whether it may log events."""

    TYPE: ClassVar[MsgType] = MsgType.PING
    WRITES: ClassVar[bool] = True

    def validate(self) -> None:
        """Check ids and ranges. Raises BadRequest."""


def _app(cmd: Any) -> None:
    app_id(cmd.app_id)


def _shuffle(cmd: Any) -> None:
    app_id(cmd.app_id)
    int_id("shuffle_id", cmd.shuffle_id)


@dataclass(frozen=True, slots=True)
class Ping(Command):
    TYPE = MsgType.PING
    WRITES = False


@dataclass(frozen=True, slots=True)
class RegisterWorker(Command):
    TYPE = MsgType.REGISTER_WORKER
    worker_id: str
    host: str
    control_port: int
    push_port: int
    replicate_port: int
    fetch_port: int
    slots: int
    incarnation: str

    def validate(self) -> None:
        worker_id(self.worker_id)
        check_host(self.host)
        for name in ("control_port", "push_port", "replicate_port", "fetch_port"):
            check_port(getattr(self, name), name)
        int_id("slots", self.slots)
        worker_id(self.incarnation)


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat(Command):
    """Soft state only: never logged. Loads are each in [0, 1].

    ``held``: (app, shuffle) keys the worker holds; the reply's ``unknown`` names those the
    master does not know, which the worker deletes (orphans of a DESTROY it missed).
    ``pushed``: ``(app, shuffle, bytes)`` pushed to this worker as primary for shuffles it
    has not committed (the largest ``MAX_HELD``); the master sums them into the tenants'
    bytes in flight (``croupier.core.quotas``). None: not reported (older workers).
    ``dirs``: per data directory ``(path, free, total, reserve, healthy)``; a worker none of
    whose directories is healthy with ``free >= reserve`` gets no new slots. None: not
    reported (every directory counts as usable).
    ``http_port``: the port of the worker's HTTP endpoint (``/metrics``) on its host, shown in
    STATUS ``master.worker_http``. None: it has none.
    ``overflow``: True when the worker spills to an object store once its disks pass their
    reserve (issue 26): full ``dirs`` then do not keep it from new slots. None: it does not.
    """

    TYPE = MsgType.WORKER_HEARTBEAT
    WRITES = False
    worker_id: str
    incarnation: str
    disk_util: float = 0.0
    io_wait: float = 0.0
    pending_flush: float = 0.0
    held: tuple[tuple[str, int], ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    pushed: tuple[tuple[str, int, int], ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    dirs: tuple[DirReport, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    http_port: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    overflow: bool | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        worker_id(self.worker_id)
        if self.dirs is not None:
            _dirs(self.dirs)
        if self.http_port is not None:
            check_port(self.http_port, "http_port")
        if self.pushed is not None:
            if len(self.pushed) > MAX_HELD:
                raise BadRequest(f"pushed lists at most {MAX_HELD} shuffles, got {len(self.pushed)}")
            for app, shuffle, nbytes in self.pushed:
                app_id(app)
                int_id("shuffle_id", shuffle)
                int_id("bytes", nbytes, 2**62)
        if self.held is not None:
            if len(self.held) > MAX_HELD:
                raise BadRequest(f"held lists at most {MAX_HELD} shuffles, got {len(self.held)}")
            for app, shuffle in self.held:
                app_id(app)
                int_id("shuffle_id", shuffle)
        for name in ("disk_util", "io_wait", "pending_flush"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise BadRequest(f"{name} must be in [0, 1], got {value}")


def _dirs(dirs: tuple[DirReport, ...]) -> None:
    if len(dirs) > MAX_DIRS:
        raise BadRequest(f"dirs lists at most {MAX_DIRS} directories, got {len(dirs)}")
    for path, free, total, reserve, _ in dirs:
        if len(path) > 4096:
            raise BadRequest("a directory path is longer than 4096 characters")
        for name, value in (("free", free), ("total", total), ("reserve", reserve)):
            int_id(name, value, 2**62)


def usable(dirs: tuple[DirReport, ...] | None) -> bool:
    """Whether a worker reporting ``dirs`` may get new slots: some directory is healthy with
    free space at or above its reserve (a worker that reports none counts as usable)."""
    return dirs is None or any(healthy and free >= reserve for _, free, _, reserve, healthy in dirs)


def full_workers(dirs: Mapping[str, tuple[DirReport, ...]], overflows: AbstractSet[str]) -> tuple[str, ...]:
    """The workers that get no new slots for lack of space, sorted: those whose last reported
    ``dirs`` are not ``usable``, but for those whose full disks overflow to an object store
    (``WorkerHeartbeat.overflow``, issue 26): they have room as long as the bucket has."""
    return tuple(sorted(w for w, d in dirs.items() if w not in overflows and not usable(d)))


@dataclass(frozen=True, slots=True)
class LoseWorker(Command):
    TYPE = MsgType.LOSE_WORKER
    worker_id: str
    reason: str = "reported lost"

    def validate(self) -> None:
        worker_id(self.worker_id)
        text("reason", self.reason)


@dataclass(frozen=True, slots=True)
class ExcludeWorker(Command):
    TYPE = MsgType.EXCLUDE_WORKER
    worker_id: str
    excluded: bool = True
    reason: str = "excluded by an operator"

    def validate(self) -> None:
        worker_id(self.worker_id)
        text("reason", self.reason)


@dataclass(frozen=True, slots=True)
class DecommissionWorker(Command):
    TYPE = MsgType.DECOMMISSION_WORKER
    worker_id: str

    def validate(self) -> None:
        worker_id(self.worker_id)


@dataclass(frozen=True, slots=True)
class RegisterApp(Command):
    """Register an app. With ``app_id`` set it is idempotent (safe to retry).

    ``tenant_token``: the tenant's token, needed when the master has a tenants file
    (``croupier.core.quotas``); a secret, so never in ``repr``, logs or events.
    """

    TYPE = MsgType.REGISTER_APP
    name: str
    app_id: str | None = None
    tenant_token: str | None = field(default=None, repr=False, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        if len(self.name) > 96:
            raise BadRequest("app name is longer than 96 characters")
        app_id(self.name)
        if self.app_id is not None:
            app_id(self.app_id)
        if self.tenant_token is not None and len(self.tenant_token) > 256:
            raise BadRequest("tenant_token is longer than 256 characters")


@dataclass(frozen=True, slots=True)
class AppHeartbeat(Command):
    TYPE = MsgType.APP_HEARTBEAT
    WRITES = False
    app_id: str

    validate = _app


@dataclass(frozen=True, slots=True)
class UnregisterApp(Command):
    TYPE = MsgType.UNREGISTER_APP
    app_id: str

    validate = _app


@dataclass(frozen=True, slots=True)
class ExpireApp(Command):
    """Sent by the app's actor when its heartbeats stop (not by clients)."""

    TYPE = MsgType.EXPIRE_APP
    app_id: str

    validate = _app


@dataclass(frozen=True, slots=True)
class RegisterShuffle(Command):
    """Place every partition. With ``shuffle_id`` or ``request_id`` set it is idempotent.

    ``request_id`` is the client's id for this call (an id like an app id), reused on
    retries: the master logs it with the shuffle and answers a repeat with that shuffle.
    ``loads`` is filled in by the master from heartbeats (worker -> score in
    [0, 1]); a client's value is ignored. So is ``full``: the workers whose last heartbeat
    reported no usable directory (they get no slots).
    """

    TYPE = MsgType.REGISTER_SHUFFLE
    app_id: str
    num_mappers: int
    num_partitions: int
    replicate: bool = True
    shuffle_id: int | None = None
    loads: dict[str, float] | None = None
    request_id: str | None = None
    full: tuple[str, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        app_id(self.app_id)
        if not 1 <= self.num_mappers <= MAX_MAPPERS:
            raise BadRequest(f"num_mappers must be in 1..{MAX_MAPPERS}")
        if not 1 <= self.num_partitions <= MAX_PARTITIONS:
            raise BadRequest(f"num_partitions must be in 1..{MAX_PARTITIONS}")
        if self.shuffle_id is not None:
            int_id("shuffle_id", self.shuffle_id)
        if self.request_id is not None:
            app_id(self.request_id)


@dataclass(frozen=True, slots=True)
class RevivePartition(Command):
    """Ask for a new location because ``epoch``'s location failed.

    Idempotent: if the partition is already past ``epoch``, the current
    location is returned and nothing is logged. ``full`` is filled in by the master, as
    for ``RegisterShuffle``.
    """

    TYPE = MsgType.REVIVE_PARTITION
    app_id: str
    shuffle_id: int
    partition: int
    epoch: int
    reason: str = "push failed"
    failed_workers: tuple[str, ...] = ()
    full: tuple[str, ...] | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def validate(self) -> None:
        _shuffle(self)
        int_id("partition", self.partition)
        int_id("epoch", self.epoch)
        text("reason", self.reason)
        for w in self.failed_workers:
            worker_id(w)


@dataclass(frozen=True, slots=True)
class MapperEnd(Command):
    """A map attempt is done: every batch and seal it pushed is acked.

    ``partitions`` is the base64 bitmap (``croupier.core.bitmap``) of the partitions it
    sealed; ``touched`` is their count. ``decide`` checks the bitmap against the shuffle.
    """

    TYPE = MsgType.MAPPER_END
    app_id: str
    shuffle_id: int
    map_id: int
    attempt_id: int
    touched: int
    partitions: str

    def validate(self) -> None:
        _shuffle(self)
        _end_fields(self.map_id, self.attempt_id, self.touched, self.partitions)


_BITMAP_CHARS = 4 * ((bitmap_size(MAX_PARTITIONS) + 2) // 3)  # the base64 of the largest bitmap


def _end_fields(map_id: int, attempt_id: int, touched: int, partitions: str) -> None:
    """Check one ``MapperEnd``'s fields: their shape here, the bitmap's length against its
    shuffle's partitions in ``decide``."""
    int_id("map_id", map_id)
    int_id("attempt_id", attempt_id)
    int_id("touched", touched, MAX_PARTITIONS)
    if len(partitions) > _BITMAP_CHARS:
        raise BadRequest("partitions is longer than any shuffle's bitmap")
    decode_bitmap(partitions)


@dataclass(frozen=True, slots=True)
class MapperEndBatch(Command):
    """``MapperEnd`` of several map attempts of one shuffle in one call.

    ``ends`` holds ``(map_id, attempt_id, touched, partitions)``, each a ``MapperEnd``'s
    fields, decided in order as that ``MapperEnd`` would be (the same events, the same
    reply): one request, one signature and one reply for up to ``MAX_ENDS_PER_CALL`` of them.
    """

    TYPE = MsgType.MAPPER_END_BATCH
    app_id: str
    shuffle_id: int
    ends: tuple[tuple[int, int, int, str], ...]

    def validate(self) -> None:
        _shuffle(self)
        if not 1 <= len(self.ends) <= MAX_ENDS_PER_CALL:
            raise BadRequest(f"ends lists 1 to {MAX_ENDS_PER_CALL} map attempts, got {len(self.ends)}")
        for i, (map_id, attempt_id, touched, partitions) in enumerate(self.ends):
            try:
                _end_fields(map_id, attempt_id, touched, partitions)
            except BadRequest as exc:
                raise BadRequest(f"ends[{i}]: {exc.message}") from None

    def commands(self) -> list[MapperEnd]:
        """The ``MapperEnd`` of each entry, in order (``validate`` has checked them)."""
        app, shuffle = self.app_id, self.shuffle_id
        return [MapperEnd(app, shuffle, m, a, t, p) for m, a, t, p in self.ends]


@dataclass(frozen=True, slots=True)
class ReportCommit(Command):
    """Commit results gathered from the workers: failed copies, missing seals and totals.

    ``lost_maps`` holds ``(partition, lo, hi)``: winning maps ``lo..hi-1`` declared the
    partition but no surviving copy holds their seal there. ``empty_copies``: copies of
    declared partitions that did not fail and hold nothing (their worker answered and
    reported no file for them).
    """

    TYPE = MsgType.REPORT_COMMIT
    app_id: str
    shuffle_id: int
    failed_copies: tuple[tuple[int, int, str], ...] = ()  # (partition, epoch, worker)
    total_bytes: int = 0
    total_batches: int = 0
    lost_maps: tuple[tuple[int, int, int], ...] = ()
    empty_copies: tuple[tuple[int, int, str], ...] = ()  # (partition, epoch, worker)

    def validate(self) -> None:
        _shuffle(self)
        for p, e, w in (*self.failed_copies, *self.empty_copies):
            int_id("partition", p)
            int_id("epoch", e)
            worker_id(w)
        for p, lo, hi in self.lost_maps:
            int_id("partition", p)
            int_id("map_id", lo)
            if not lo < hi <= MAX_MAPPERS:
                raise BadRequest(f"lost_maps range [{lo}, {hi}) is empty or out of range")
        int_id("total_bytes", self.total_bytes, 2**62)
        int_id("total_batches", self.total_batches, 2**62)


# one offloaded copy: (partition, epoch, role, size, blake3 hex of its data object)
OffloadedCopyWire = tuple[int, int, str, int, str]
MAX_OFFLOADS_PER_REPORT = 10_000


def check_offloaded(copies: tuple[OffloadedCopyWire, ...]) -> None:
    """The copies of a REPORT_OFFLOAD (and its CopiesOffloaded event). Raises BadRequest."""
    if not 1 <= len(copies) <= MAX_OFFLOADS_PER_REPORT:
        raise BadRequest(f"copies must hold 1 to {MAX_OFFLOADS_PER_REPORT} entries")
    for p, e, role, size, digest in copies:
        int_id("partition", p)
        int_id("epoch", e)
        if role not in ("primary", "replica"):
            raise BadRequest(f"role must be primary or replica, not {role!r}")
        int_id("size", size, 2**62)
        if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
            raise BadRequest("digest must be 64 lowercase hex digits (BLAKE3)")


@dataclass(frozen=True, slots=True)
class ReportOffload(Command):
    """A worker uploaded committed copies to the object store (issue 26): each as the objects
    ``<app>/<shuffle>/<partition>-<epoch>-<role>.data`` and ``.index`` under its prefix."""

    TYPE = MsgType.REPORT_OFFLOAD
    worker_id: str
    app_id: str
    shuffle_id: int
    copies: tuple[OffloadedCopyWire, ...]

    def validate(self) -> None:
        worker_id(self.worker_id)
        _shuffle(self)
        check_offloaded(self.copies)


@dataclass(frozen=True, slots=True)
class GetLocations(Command):
    """Where a partition lives (every epoch) and which attempt of each map won."""

    TYPE = MsgType.GET_LOCATIONS
    WRITES = False
    app_id: str
    shuffle_id: int
    partition: int

    def validate(self) -> None:
        _shuffle(self)
        int_id("partition", self.partition)


@dataclass(frozen=True, slots=True)
class GetLocationsBatch(Command):
    """``GetLocations`` for several partitions of one shuffle in one call (readers of many)."""

    TYPE = MsgType.GET_LOCATIONS_BATCH
    WRITES = False
    app_id: str
    shuffle_id: int
    partitions: tuple[int, ...]

    def validate(self) -> None:
        _shuffle(self)
        if not 1 <= len(self.partitions) <= MAX_PARTITIONS_PER_CALL:
            raise BadRequest(f"partitions lists 1 to {MAX_PARTITIONS_PER_CALL}, got {len(self.partitions)}")
        for p in self.partitions:
            int_id("partition", p)


@dataclass(frozen=True, slots=True)
class GetShuffle(Command):
    TYPE = MsgType.GET_SHUFFLE
    WRITES = False
    app_id: str
    shuffle_id: int

    validate = _shuffle


@dataclass(frozen=True, slots=True)
class UnregisterShuffle(Command):
    TYPE = MsgType.UNREGISTER_SHUFFLE
    app_id: str
    shuffle_id: int

    validate = _shuffle


@dataclass(frozen=True, slots=True)
class Status(Command):
    TYPE = MsgType.STATUS
    WRITES = False


@dataclass(frozen=True, slots=True)
class TakeOver(Command):
    """Internal: a newly elected leader logs its term before it serves (never from clients)."""

    TYPE = MsgType.TAKE_OVER
    term: int
    leader: str

    def validate(self) -> None:
        int_id("term", self.term)
        check_tcp_url(self.leader, "leader")


@dataclass(frozen=True, slots=True)
class RerunMaps(Command):
    """Reopen a committed shuffle for new attempts of exactly ``maps`` (their data is lost).

    Each map's winner is dropped, its old winning attempt is refused from now on, and each
    partition the maps declared gets a new epoch on healthy workers; the shuffle commits
    again once every map has ended. Decided in ``croupier.core.rerun``.
    """

    TYPE = MsgType.RERUN_MAPS
    app_id: str
    shuffle_id: int
    maps: tuple[int, ...]

    def validate(self) -> None:
        _shuffle(self)
        if not 1 <= len(self.maps) <= MAX_RERUN_MAPS:
            raise BadRequest(f"maps lists 1 to {MAX_RERUN_MAPS} map ids, got {len(self.maps)}")
        for m in self.maps:
            int_id("map_id", m)


@dataclass(frozen=True, slots=True)
class GetLostMaps(Command):
    """Which winning maps of a shuffle have data on no live, valid copy (``croupier.core.rerun``)."""

    TYPE = MsgType.GET_LOST_MAPS
    WRITES = False
    app_id: str
    shuffle_id: int

    validate = _shuffle


INTERNAL_TYPES = frozenset({int(MsgType.TAKE_OVER)})


COMMAND_TYPES: dict[int, type[Command]] = {
    int(cls.TYPE): cls
    for cls in (
        Ping,
        RegisterWorker,
        WorkerHeartbeat,
        LoseWorker,
        ExcludeWorker,
        DecommissionWorker,
        RegisterApp,
        AppHeartbeat,
        UnregisterApp,
        ExpireApp,
        RegisterShuffle,
        RevivePartition,
        MapperEnd,
        MapperEndBatch,
        ReportCommit,
        ReportOffload,
        GetLocations,
        GetLocationsBatch,
        GetShuffle,
        UnregisterShuffle,
        Status,
        TakeOver,
        RerunMaps,
        GetLostMaps,
    )
}


def encode_command(cmd: Command) -> tuple[int, dict[str, Any]]:
    """The (msg_type, JSON body) pair for a command."""
    body = to_json(cmd)
    return int(cmd.TYPE), body


def decode_command(msg_type: int, body: dict[str, Any]) -> Command:
    """Build and validate a command from a request.

    Raises:
        BadRequest: an unknown type, a wrong shape or an invalid id.
    """
    cls = COMMAND_TYPES.get(msg_type)
    if cls is None:
        raise BadRequest(f"unknown master message type {msg_type}")
    cmd = from_json(cls, body)
    cmd.validate()
    return cmd
