"""The master's durable state, and ``apply``: the fold of the event log.

``apply(state, event)`` looks the event's type up in ``_APPLIERS``, a table of one
small function per event kind. Each checks the event against the state first and
only then mutates, so an event it rejects (``InvalidEvent``) leaves the state
untouched (``tests/core/test_fold_properties.py`` checks this for every kind).
It mutates ``state`` in place and returns it: the fold runs for every event on
every master, and copying a state with 100,000 partitions per event would not
do. Callers that need the old state keep a ``copy()``.

State (everything here is rebuilt by folding the log; nothing else is):
    workers   worker id -> WorkerInfo (address, slots, status, used slots)
    apps      app id -> AppInfo
    shuffles  (app id, shuffle id) -> ShuffleInfo (placement, revivals,
              winning attempts with their declared partition bitmaps, commit outcome,
              the client's request id; after a rerun, the refused attempts, the maps
              ever rerun and the epochs committed before it: ``croupier.core.rerun``)
    term, leader, seq   the last LeaderChanged, and the log position folded so far

``ShuffleInfo.derived`` is not state: caches computed from the fields above (one
bytes object per distinct bitmap, the winners as runs for the locations replies, and
each partition's declaring maps once the winners are final), never logged or
snapshotted, rebuilt on demand after a replay. The runs are a function of the winners
alone, so a snapshot's fresh state answers exactly as the state it was taken from.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from croupier.core.bitmap import decode_bitmap, encode_bitmap, ranges, validate_bitmap
from croupier.core.codec import from_json, to_json
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError
from croupier.core.events import (
    AppExpired,
    AppRegistered,
    AppUnregistered,
    CopiesOffloaded,
    Event,
    LeaderChanged,
    MapperEnded,
    MappersEnded,
    MapsRerun,
    PartitionRevived,
    ShuffleCommitted,
    ShuffleRegistered,
    ShuffleUnregistered,
    WorkerDecommissioning,
    WorkerExcluded,
    WorkerLost,
    WorkerRegistered,
    WorkerRemoved,
)
from croupier.core.placement import slots_per_worker
from croupier.core.replies import WorkerAddress
from croupier.core.runs import RunCache

__all__ = [
    "AppInfo",
    "CommitInfo",
    "InvalidEvent",
    "Location",
    "MasterState",
    "ShuffleInfo",
    "Winner",
    "WorkerInfo",
    "apply",
    "encode_snapshot",
]

# short names for the statuses ``apply`` sets
LOST = WorkerStatus.LOST
DECOMMISSIONING = WorkerStatus.DECOMMISSIONING


class InvalidEvent(CroupierError):
    """An event that does not fit the state: a bug in ``decide`` or a corrupt log."""

    code = "INTERNAL"


@dataclass(slots=True)
class WorkerInfo:
    worker_id: str
    host: str
    control_port: int
    push_port: int
    replicate_port: int
    fetch_port: int
    slots: int
    incarnation: str
    status: WorkerStatus = WorkerStatus.ACTIVE
    excluded: bool = False
    used_slots: int = 0
    registered_at: float = 0.0

    @property
    def eligible(self) -> bool:
        """May this worker get new slots?"""
        return self.status == WorkerStatus.ACTIVE and not self.excluded

    def address(self) -> WorkerAddress:
        """What clients need to reach the worker."""
        return WorkerAddress(
            self.worker_id,
            self.host,
            self.control_port,
            self.push_port,
            self.replicate_port,
            self.fetch_port,
            self.incarnation,
            self.status,
        )


@dataclass(slots=True)
class AppInfo:
    app_id: str
    name: str
    registered_at: float
    next_shuffle_id: int = 0
    tenant: str = "default"  # croupier.core.quotas; snapshots from before tenants have none
    key_tag: str = ""  # this registration's app key tag (PROTOCOL §2.1); "" before tags


@dataclass(frozen=True, slots=True)
class Location:
    """One epoch of one partition, with the incarnations its workers had when it was placed."""

    epoch: int
    primary: str
    replica: str | None
    incarnations: tuple[tuple[str, str], ...] = ()

    def incarnation(self, worker: str) -> str | None:
        return dict(self.incarnations).get(worker)


@dataclass(frozen=True, slots=True)
class CommitInfo:
    lost_copies: tuple[tuple[int, int, str], ...]
    lost_partitions: tuple[int, ...]
    total_bytes: int
    total_batches: int
    at: float
    lost_maps: tuple[tuple[int, int, int], ...] = ()  # (partition, lo, hi): missing winning maps
    # (partition, epoch, worker): copies that hold nothing (ShuffleCommitted v3; none before)
    empty_copies: tuple[tuple[int, int, str], ...] = ()


_SHARED_BITMAPS = 1024  # distinct bitmaps a shuffle shares between its winners

Winner = tuple[int, int, bytes | None]
"""A map's winning ``(attempt, touched, partitions bitmap)``; the bitmap is None when not declared."""
Ranges = tuple[tuple[int, int], ...]


Run = tuple[int, int, int]
# beyond max(1,024, num_mappers / 16) runs of equal bitmaps (few maps share theirs), the
# runs are dropped and ``maps`` scans the winners: they would save little and cost memory
_BITMAP_RUNS_MIN = 1024
_BITMAP_RUNS_SHARE = 16


@dataclass(slots=True)
class Derived:
    """Caches derived from a shuffle's durable fields (see the module docstring)."""

    bitmaps: dict[bytes, bytes] = field(default_factory=dict)  # one shared object per distinct bitmap
    winner_runs: RunCache[int] = field(default_factory=RunCache)  # the winning attempts as runs
    # the declared bitmaps as runs of equal ones (dense shuffles share few): ``maps`` in O(runs)
    bitmap_runs: RunCache[bytes | None] = field(default_factory=lambda: RunCache(_BITMAP_RUNS_MIN))
    maps: dict[int, Ranges | None] = field(default_factory=dict)  # partition -> declaring maps
    lost_maps: dict[int, Ranges] | None = None  # partition -> missing maps, from the commit
    refused: frozenset[tuple[int, int]] | None = None  # ``ShuffleInfo.refused`` as a set


@dataclass(slots=True)
class ShuffleInfo:
    app_id: str
    shuffle_id: int
    num_mappers: int
    num_partitions: int
    replicate: bool
    pairs: tuple[tuple[str, str | None], ...]
    registered_at: float
    incarnations: tuple[tuple[str, str], ...] = ()
    revivals: dict[int, list[Location]] = field(default_factory=dict)
    winners: dict[int, Winner] = field(default_factory=dict)
    commit: CommitInfo | None = None
    request_id: str | None = None
    # reruns (``croupier.core.rerun``): (map, attempt) pairs that lost their data and may never
    # win again, and the (lo, hi) ranges of every map ever rerun
    refused: tuple[tuple[int, int], ...] = ()
    rerun: tuple[tuple[int, int], ...] = ()
    # (partition, n): epochs 0..n-1 were committed before the last rerun (a partition not
    # listed: epoch 0); only meaningful once ``rerun`` is set
    committed_epochs: tuple[tuple[int, int], ...] = ()
    # the copies in the object store (issue 26): (partition, epoch, role, size, blake3), sorted
    offloaded: tuple[tuple[int, int, str, int, str], ...] = ()
    derived: Derived = field(default_factory=Derived, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cap = max(_BITMAP_RUNS_MIN, self.num_mappers // _BITMAP_RUNS_SHARE)
        self.derived.bitmap_runs = RunCache(cap)

    def locations(self, partition: int) -> list[Location]:
        """Every epoch of ``partition``, oldest first."""
        primary, replica = self.pairs[partition % len(self.pairs)]
        return [Location(0, primary, replica, self.incarnations), *self.revivals.get(partition, [])]

    def current(self, partition: int) -> Location:
        return self.locations(partition)[-1]

    @property
    def all_ended(self) -> bool:
        return len(self.winners) == self.num_mappers

    def add_winner(self, map_id: int, attempt: int, touched: int, bitmap: bytes | None) -> None:
        """Record a winner, sharing one bytes object between equal bitmaps (dense shuffles)."""
        if bitmap is not None:
            shared = self.derived.bitmaps.get(bitmap)
            if shared is not None:
                bitmap = shared
            elif len(self.derived.bitmaps) < _SHARED_BITMAPS:  # bounded: random bitmaps rarely repeat
                self.derived.bitmaps[bitmap] = bitmap
        self.winners[map_id] = (attempt, touched, bitmap)
        self.derived.winner_runs.add(map_id, attempt)
        self.derived.bitmap_runs.add(map_id, bitmap)

    def was_committed(self, partition: int, epoch: int) -> bool:
        """Whether a commit before the last rerun covered this location: its files are on disk,
        so a worker restarted since still serves them (its memory no longer matters)."""
        if not self.rerun:
            return False
        return epoch < dict(self.committed_epochs).get(partition, 1)

    def refuses(self, map_id: int, attempt: int) -> bool:
        """Whether a rerun refused this attempt of the map (its data was lost)."""
        if not self.refused:
            return False
        if self.derived.refused is None:
            self.derived.refused = frozenset(self.refused)
        return (map_id, attempt) in self.derived.refused

    def drop_winners(self, maps: set[int]) -> None:
        """Forget the winners of ``maps`` (a rerun) and rebuild the caches derived from them."""
        for m in maps:
            del self.winners[m]
        winners, self.winners = self.winners, {}
        self.derived = Derived()
        self.__post_init__()
        for m, (attempt, touched, bitmap) in sorted(winners.items()):
            self.add_winner(m, attempt, touched, bitmap)

    def winner_runs(self) -> tuple[Run, ...]:
        """The winners as sorted maximal ``(lo, hi, attempt)`` runs (no O(num_mappers) work)."""
        runs = self.derived.winner_runs.runs()
        assert runs is not None  # no cap
        return runs

    def declared_maps(self, partition: int) -> Ranges | None:
        """Ranges of the winning maps that declared ``partition``; None while some winner has
        no bitmap (it ended before bitmaps were logged). Cached once every map has ended."""
        cache = self.derived.maps
        if partition in cache:
            return cache[partition]
        answer = self._declaring(partition)
        if self.all_ended:  # the winners are final: the answer never changes
            cache[partition] = answer
        return answer

    def _declaring(self, partition: int) -> Ranges | None:
        byte, mask = partition >> 3, 1 << (partition & 7)
        runs = self.derived.bitmap_runs.runs()
        if runs is not None:  # O(runs of equal bitmaps): one byte test per run
            declared_runs: list[tuple[int, int]] = []
            for lo, hi, bitmap in runs:
                if bitmap is None:
                    return None
                if bitmap[byte] & mask:
                    if declared_runs and declared_runs[-1][1] == lo:
                        declared_runs[-1] = (declared_runs[-1][0], hi)
                    else:
                        declared_runs.append((lo, hi))
            return tuple(declared_runs)
        # too many distinct bitmaps: O(num_mappers), one byte test per winner (bitmaps were
        # checked to be full length)
        get = self.winners.get
        declared: list[int] = []
        for m in range(self.num_mappers):
            winner = get(m)
            if winner is None:
                continue
            bitmap = winner[2]
            if bitmap is None:
                return None
            if bitmap[byte] & mask:
                declared.append(m)
        return ranges(declared)

    def lost_maps(self, partition: int) -> Ranges:
        """Ranges of the winning maps whose data in ``partition`` the commit found gone."""
        if self.commit is None:
            return ()
        if self.derived.lost_maps is None:
            by_partition: dict[int, list[tuple[int, int]]] = {}
            for p, lo, hi in self.commit.lost_maps:
                by_partition.setdefault(p, []).append((lo, hi))
            self.derived.lost_maps = {p: tuple(sorted(r)) for p, r in by_partition.items()}
        return self.derived.lost_maps.get(partition, ())

    def workers(self) -> set[str]:
        """Every worker that hosts a location of this shuffle (any epoch)."""
        out = {w for pair in self.pairs for w in pair if w is not None}
        for locs in self.revivals.values():
            for loc in locs:
                out.add(loc.primary)
                if loc.replica is not None:
                    out.add(loc.replica)
        return out

    def slot_usage(self) -> dict[str, int]:
        usage = slots_per_worker(self.pairs, self.num_partitions)
        for locs in self.revivals.values():
            for loc in locs:
                usage[loc.primary] = usage.get(loc.primary, 0) + 1
                if loc.replica is not None:
                    usage[loc.replica] = usage.get(loc.replica, 0) + 1
        return usage


@dataclass(slots=True)
class MasterState:
    workers: dict[str, WorkerInfo] = field(default_factory=dict)
    apps: dict[str, AppInfo] = field(default_factory=dict)
    shuffles: dict[tuple[str, int], ShuffleInfo] = field(default_factory=dict)
    term: int = 0
    leader: str = ""
    seq: int = 0

    def shuffle(self, app: str, shuffle_id: int) -> ShuffleInfo | None:
        return self.shuffles.get((app, shuffle_id))

    def app_shuffles(self, app: str) -> list[ShuffleInfo]:
        return [s for (a, _), s in self.shuffles.items() if a == app]

    # -- snapshots -------------------------------------------------------------------------
    def rows(self) -> int:
        """The size of the state in a snapshot's rows: workers, apps, shuffles and winners."""
        return len(self.workers) + len(self.apps) + sum(1 + len(s.winners) for s in self.shuffles.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the whole state (snapshots, admin status, tests)."""
        return {
            "workers": [to_json(w) for w in sorted(self.workers.values(), key=lambda w: w.worker_id)],
            "apps": [to_json(a) for a in sorted(self.apps.values(), key=lambda a: a.app_id)],
            "shuffles": [_shuffle_json(s) for _, s in sorted(self.shuffles.items())],
            "term": self.term,
            "leader": self.leader,
            "seq": self.seq,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MasterState:
        state = cls(term=int(data["term"]), leader=str(data["leader"]), seq=int(data["seq"]))
        for w in data["workers"]:
            worker = from_json(WorkerInfo, w)
            state.workers[worker.worker_id] = worker
        for a in data["apps"]:
            app = from_json(AppInfo, a)
            state.apps[app.app_id] = app
        for s in data["shuffles"]:
            base = {k: v for k, v in s.items() if k not in ("revivals", "winners", "commit")}
            base["pairs"] = [list(p) for p in base["pairs"]]
            info = from_json(ShuffleInfo, base)
            info.commit = from_json(CommitInfo, s["commit"]) if s.get("commit") else None
            info.revivals = {int(p): [from_json(Location, loc) for loc in locs] for p, locs in s["revivals"]}
            for m, a, t, *bitmap in s["winners"]:  # snapshots before bitmaps have 3 items
                declared = decode_bitmap(bitmap[0]) if bitmap and bitmap[0] is not None else None
                info.add_winner(int(m), int(a), int(t), declared)
            state.shuffles[(info.app_id, info.shuffle_id)] = info
        return state

    def snapshot_bytes(self) -> bytes:
        """Compressed JSON of the state, for the event log's snapshots."""
        return encode_snapshot(self.to_json())

    @classmethod
    def from_snapshot(cls, data: bytes) -> MasterState:
        return cls.from_json(json.loads(zlib.decompress(data)))

    def copy(self) -> MasterState:
        return MasterState.from_json(json.loads(json.dumps(self.to_json())))


def encode_snapshot(data: dict[str, Any], dumps: Callable[[Any], bytes] | None = None) -> bytes:
    """``MasterState.snapshot_bytes`` of the state whose ``to_json()`` is ``data``. That dict
    shares no mutable object with the state, so this may run on another thread while the
    state changes (the master's actor hands it to the group committer's thread).

    ``dumps``: a faster compact JSON encoder than ``json`` (the master passes orjson's; ``core``
    is stdlib only); its text may differ in float spelling, never in the values read back.
    """
    text = json.dumps(data, separators=(",", ":")).encode() if dumps is None else dumps(data)
    return zlib.compress(text, 6)


def _shuffle_json(s: ShuffleInfo) -> dict[str, Any]:
    """One shuffle in a snapshot: its fields, without the derived caches."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(s):
        if f.name == "revivals":
            out[f.name] = [[p, [to_json(loc) for loc in locs]] for p, locs in sorted(s.revivals.items())]
        elif f.name == "winners":
            out[f.name] = _winner_rows(s.winners)
        elif f.name != "derived":
            out[f.name] = to_json(getattr(s, f.name))
    return out


def _winner_rows(winners: dict[int, Winner]) -> list[list[Any]]:
    """The winners in a snapshot: ``[map, attempt, touched, bitmap]`` by map; each distinct
    bitmap (winners share a few) is encoded once (issue 27: 0.72x the time for 100,000)."""
    texts: dict[bytes | None, str | None] = {None: None}

    def text(bitmap: bytes | None) -> str | None:
        got = texts.get(bitmap, "")
        if got == "":
            got = texts[bitmap] = encode_bitmap(bitmap)  # type: ignore[arg-type]
        return got

    return [[m, a, t, text(b)] for m, (a, t, b) in sorted(winners.items())]


# -- the fold ------------------------------------------------------------------------------


def _need_worker(state: MasterState, wid: str, event: Event) -> WorkerInfo:
    worker = state.workers.get(wid)
    if worker is None:
        raise InvalidEvent(f"{event.KIND} names unknown worker {wid!r}")
    return worker


def _need_shuffle(state: MasterState, app: str, sid: int, event: Event) -> ShuffleInfo:
    info = state.shuffles.get((app, sid))
    if info is None:
        raise InvalidEvent(f"{event.KIND} names unknown shuffle {app}/{sid}")
    return info


def _check_pair(state: MasterState, primary: str, replica: str | None, event: Event) -> None:
    """Both workers of a location are known and distinct."""
    _need_worker(state, primary, event)
    if replica is not None:
        _need_worker(state, replica, event)
        if replica == primary:
            raise InvalidEvent(f"primary and replica are both {primary}")


def _release(state: MasterState, info: ShuffleInfo) -> None:
    for wid, used in info.slot_usage().items():
        worker = state.workers.get(wid)
        if worker is not None:
            worker.used_slots = max(0, worker.used_slots - used)


def _worker_registered(state: MasterState, event: WorkerRegistered) -> None:
    # a worker that registers again (a restart) keeps the slots its shuffles hold and its exclusion
    old = state.workers.get(event.worker_id)
    state.workers[event.worker_id] = WorkerInfo(
        worker_id=event.worker_id,
        host=event.host,
        control_port=event.control_port,
        push_port=event.push_port,
        replicate_port=event.replicate_port,
        fetch_port=event.fetch_port,
        slots=event.slots,
        incarnation=event.incarnation,
        used_slots=old.used_slots if old else 0,
        excluded=old.excluded if old else False,
        registered_at=event.at,
    )


def _worker_lost(state: MasterState, event: WorkerLost) -> None:
    _need_worker(state, event.worker_id, event).status = LOST


def _worker_excluded(state: MasterState, event: WorkerExcluded) -> None:
    _need_worker(state, event.worker_id, event).excluded = event.excluded


def _worker_decommissioning(state: MasterState, event: WorkerDecommissioning) -> None:
    _need_worker(state, event.worker_id, event).status = DECOMMISSIONING


def _worker_removed(state: MasterState, event: WorkerRemoved) -> None:
    _need_worker(state, event.worker_id, event)
    del state.workers[event.worker_id]


def _app_registered(state: MasterState, event: AppRegistered) -> None:
    if event.app_id in state.apps:
        raise InvalidEvent(f"app {event.app_id} is already registered")
    state.apps[event.app_id] = AppInfo(
        event.app_id, event.name, event.at, tenant=event.tenant, key_tag=event.key_tag
    )


def _app_gone(state: MasterState, event: AppUnregistered | AppExpired) -> None:
    if event.app_id not in state.apps:
        raise InvalidEvent(f"{event.KIND} names unknown app {event.app_id!r}")
    for info in state.app_shuffles(event.app_id):
        _release(state, info)
        del state.shuffles[(info.app_id, info.shuffle_id)]
    del state.apps[event.app_id]


def _shuffle_registered(state: MasterState, event: ShuffleRegistered) -> None:
    app = state.apps.get(event.app_id)
    if app is None:
        raise InvalidEvent(f"ShuffleRegistered names unknown app {event.app_id!r}")
    if (event.app_id, event.shuffle_id) in state.shuffles:
        raise InvalidEvent(f"shuffle {event.app_id}/{event.shuffle_id} is already registered")
    if not event.pairs:
        raise InvalidEvent("ShuffleRegistered has no worker pairs")
    for primary, replica in event.pairs:
        _check_pair(state, primary, replica, event)
    info = ShuffleInfo(
        app_id=event.app_id,
        shuffle_id=event.shuffle_id,
        num_mappers=event.num_mappers,
        num_partitions=event.num_partitions,
        replicate=event.replicate,
        pairs=event.pairs,
        registered_at=event.at,
        incarnations=event.incarnations,
        request_id=event.request_id,
    )
    state.shuffles[(event.app_id, event.shuffle_id)] = info
    app.next_shuffle_id = max(app.next_shuffle_id, event.shuffle_id + 1)
    for wid, used in info.slot_usage().items():
        state.workers[wid].used_slots += used


def _partition_revived(state: MasterState, event: PartitionRevived) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    if not 0 <= event.partition < info.num_partitions:
        raise InvalidEvent(f"partition {event.partition} out of range")
    if event.epoch != info.current(event.partition).epoch + 1:
        raise InvalidEvent(f"revive to epoch {event.epoch} skips or repeats an epoch")
    _check_pair(state, event.primary, event.replica, event)
    state.workers[event.primary].used_slots += 1
    if event.replica is not None:
        state.workers[event.replica].used_slots += 1
    info.revivals.setdefault(event.partition, []).append(
        Location(event.epoch, event.primary, event.replica, event.incarnations)
    )


def _mapper_ended(state: MasterState, event: MapperEnded) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    if not 0 <= event.map_id < info.num_mappers:
        raise InvalidEvent(f"map {event.map_id} out of range")
    if event.map_id in info.winners:
        raise InvalidEvent(f"map {event.map_id} already has a winning attempt")
    bitmap = None
    if event.partitions is not None:
        try:
            bitmap = decode_bitmap(event.partitions)
            validate_bitmap(bitmap, info.num_partitions, event.touched)
        except CroupierError as exc:
            raise InvalidEvent(f"MapperEnded for map {event.map_id}: {exc.message}") from exc
    info.add_winner(event.map_id, event.attempt_id, event.touched, bitmap)


def _mappers_ended(state: MasterState, event: MappersEnded) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    if not event.ends:
        raise InvalidEvent("MappersEnded names no map")
    seen: set[int] = set()
    bitmaps: list[bytes] = []
    for map_id, _, touched, partitions in event.ends:  # every check first: a rejected event changes nothing
        if not 0 <= map_id < info.num_mappers:
            raise InvalidEvent(f"map {map_id} out of range")
        if map_id in info.winners or map_id in seen:
            raise InvalidEvent(f"map {map_id} already has a winning attempt")
        seen.add(map_id)
        try:
            bitmap = decode_bitmap(partitions)
            validate_bitmap(bitmap, info.num_partitions, touched)
        except CroupierError as exc:
            raise InvalidEvent(f"MappersEnded for map {map_id}: {exc.message}") from exc
        bitmaps.append(bitmap)
    for (map_id, attempt, touched, _), bitmap in zip(event.ends, bitmaps, strict=True):
        info.add_winner(map_id, attempt, touched, bitmap)


def _shuffle_committed(state: MasterState, event: ShuffleCommitted) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    if info.commit is not None:
        raise InvalidEvent(f"shuffle {event.app_id}/{event.shuffle_id} is already committed")
    for p, lo, hi in event.lost_maps:
        if not (0 <= p < info.num_partitions and 0 <= lo < hi <= info.num_mappers):
            raise InvalidEvent(f"lost_maps names partition {p} maps {lo}..{hi - 1}, out of range")
    for p, _, _ in event.empty_copies:
        if not 0 <= p < info.num_partitions:
            raise InvalidEvent(f"empty_copies names partition {p}, out of range")
    info.commit = CommitInfo(
        event.lost_copies,
        event.lost_partitions,
        event.total_bytes,
        event.total_batches,
        event.at,
        event.lost_maps,
        event.empty_copies,
    )


def _maps_rerun(state: MasterState, event: MapsRerun) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    if info.commit is None:
        raise InvalidEvent(f"MapsRerun of shuffle {event.app_id}/{event.shuffle_id}, which is not committed")
    maps = {m for lo, hi in event.maps for m in range(lo, hi)}
    if not maps or any(m not in info.winners for m in maps):
        raise InvalidEvent(f"MapsRerun names maps without a winner: {sorted(maps)[:10]}")
    if any(info.winners.get(m, (None,))[0] != a for m, a in event.refused):
        raise InvalidEvent("MapsRerun refuses an attempt that is not the map's winner")
    info.drop_winners(maps)
    info.committed_epochs = tuple(sorted((p, len(locs) + 1) for p, locs in info.revivals.items()))
    info.commit = None
    info.refused = tuple(sorted({*info.refused, *event.refused}))
    info.derived.refused = None
    info.rerun = ranges(sorted(maps | {m for lo, hi in info.rerun for m in range(lo, hi)}))


def _shuffle_unregistered(state: MasterState, event: ShuffleUnregistered) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    _release(state, info)
    del state.shuffles[(event.app_id, event.shuffle_id)]


def _copies_offloaded(state: MasterState, event: CopiesOffloaded) -> None:
    info = _need_shuffle(state, event.app_id, event.shuffle_id, event)
    _need_worker(state, event.worker_id, event)
    # one entry per (partition, epoch, role): a copy uploaded again replaces its entry
    by_copy = {(p, e, r): (p, e, r, n, d) for p, e, r, n, d in (*info.offloaded, *event.copies)}
    info.offloaded = tuple(sorted(by_copy.values()))


def _leader_changed(state: MasterState, event: LeaderChanged) -> None:
    if event.term < state.term:
        raise InvalidEvent(f"term {event.term} is older than {state.term}")
    state.term = event.term
    state.leader = event.leader


# Each function checks everything first and only then mutates: a rejected event changes nothing.
_APPLIERS: dict[type[Event], Callable[[MasterState, Any], None]] = {
    WorkerRegistered: _worker_registered,
    WorkerLost: _worker_lost,
    WorkerExcluded: _worker_excluded,
    WorkerDecommissioning: _worker_decommissioning,
    WorkerRemoved: _worker_removed,
    AppRegistered: _app_registered,
    AppUnregistered: _app_gone,
    AppExpired: _app_gone,
    ShuffleRegistered: _shuffle_registered,
    PartitionRevived: _partition_revived,
    MapperEnded: _mapper_ended,
    MappersEnded: _mappers_ended,
    ShuffleCommitted: _shuffle_committed,
    ShuffleUnregistered: _shuffle_unregistered,
    LeaderChanged: _leader_changed,
    MapsRerun: _maps_rerun,
    CopiesOffloaded: _copies_offloaded,
}


def apply(state: MasterState, event: Event) -> MasterState:
    """Fold one event into ``state`` (in place) and return it.

    Raises:
        InvalidEvent: the event does not fit the state, or is of no known kind; ``state`` is unchanged.
    """
    applier = _APPLIERS.get(type(event))
    if applier is None:
        raise InvalidEvent(f"unknown event {event!r}")
    applier(state, event)
    return state
