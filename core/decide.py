"""``decide(state, command, now, rng) -> (reply, events)``: the master's logic.

Pure: it reads ``state`` and never mutates it. Time and randomness come in as
``now`` and ``rng``. The caller appends ``events`` to the log durably, folds
them with ``apply``, and only then sends ``reply``. Errors are raised as
``CroupierError`` subclasses and produce no events.

Idempotence matters because clients retry across timeouts and failovers: a
repeated ``MapperEnd``, ``RevivePartition``, ``RegisterApp`` (with an id) or
``RegisterShuffle`` (with a shuffle id or a request id) logs nothing new and
returns the same answer; so does a ``RerunMaps`` of maps still rerunning.
``RerunMaps`` and ``GetLostMaps`` are decided in ``croupier.core.rerun``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from croupier.core.commands import (
    AppHeartbeat,
    Command,
    DecommissionWorker,
    ExcludeWorker,
    ExpireApp,
    GetLocations,
    GetLocationsBatch,
    GetLostMaps,
    GetShuffle,
    LoseWorker,
    MapperEnd,
    MapperEndBatch,
    Ping,
    RegisterApp,
    RegisterShuffle,
    RegisterWorker,
    ReportCommit,
    ReportOffload,
    RerunMaps,
    RevivePartition,
    Status,
    TakeOver,
    UnregisterApp,
    UnregisterShuffle,
    WorkerHeartbeat,
)
from croupier.core.commit_verdict import empty_copies, lost_epochs
from croupier.core.enums import WorkerStatus
from croupier.core.errors import (
    BadRequest,
    Conflict,
    NotCommitted,
    QuotaExceeded,
    Unauthorized,
    UnknownWorker,
)
from croupier.core.events import (
    AppExpired,
    AppRegistered,
    AppUnregistered,
    CopiesOffloaded,
    Event,
    LeaderChanged,
    PartitionRevived,
    ShuffleCommitted,
    ShuffleRegistered,
    ShuffleUnregistered,
    WorkerDecommissioning,
    WorkerExcluded,
    WorkerLost,
    WorkerRegistered,
)
from croupier.core.lookup import need_app as _app
from croupier.core.lookup import need_shuffle as _shuffle
from croupier.core.map_ends import end_map, end_maps
from croupier.core.placement import Candidate, place
from croupier.core.quotas import DEFAULT_TENANT, QuotaContext, check_shuffle, resolve_tenant
from croupier.core.replies import (
    AppHeartbeatReply,
    AppRow,
    ChangedReply,
    DecommissionReply,
    LocationsBatchReply,
    LocationsReply,
    PartitionLocation,
    PartitionLocations,
    PingReply,
    RegisterAppReply,
    RegisterWorkerReply,
    Reply,
    ShuffleSummary,
    StatusReply,
    TakeOverReply,
    WinnerRunsWire,
    WorkerAddress,
    WorkerHeartbeatReply,
)
from croupier.core.rerun import get_lost_maps, rerun_maps
from croupier.core.state import Location, MasterState, ShuffleInfo
from croupier.core.worker_rows import shown_status, worker_row

__all__ = ["Decision", "decide", "locations_batch_reply", "locations_reply", "shuffle_reply", "status_reply"]

Decision = tuple[Reply, list[Event]]
FailedCopies = dict[int, list[tuple[int, str]]]


def _worker(state: MasterState, wid: str) -> None:
    if wid not in state.workers:
        raise UnknownWorker(f"worker {wid!r} is not registered")


def candidates(state: MasterState, avoid: frozenset[str] = frozenset()) -> list[Candidate]:
    """Workers that may take new slots."""
    return [
        Candidate(w.worker_id, w.host, w.slots - w.used_slots)
        for w in state.workers.values()
        if w.eligible and w.worker_id not in avoid
    ]


def locations_reply(state: MasterState, info: ShuffleInfo, partition: int) -> LocationsReply:
    """Every epoch of a partition with worker addresses, plus the winners and commit state."""
    entry = _partition_locations(_Addresses(state), info, partition, _failed_copies(info))
    return LocationsReply(
        *_read_state(info),
        entry.partition,
        entry.locations,
        entry.lost,
        entry.failed_copies,
        entry.maps,
        entry.lost_maps,
    )


def locations_batch_reply(
    state: MasterState, info: ShuffleInfo, partitions: tuple[int, ...]
) -> LocationsBatchReply:
    """``locations_reply`` for several partitions: the shared part once, then one entry each."""
    addresses, failed = _Addresses(state), _failed_copies(info)
    return LocationsBatchReply(
        *_read_state(info), tuple(_partition_locations(addresses, info, p, failed) for p in partitions)
    )


def _read_state(info: ShuffleInfo) -> tuple[str, int, int, WinnerRunsWire, bool]:
    """The fields of ``ShuffleReadState``, in order: the winners as runs, kept by the state
    as maps end, so a reply costs O(runs), never O(num_mappers)."""
    return info.app_id, info.shuffle_id, info.num_mappers, info.winner_runs(), info.commit is not None


def _failed_copies(info: ShuffleInfo) -> FailedCopies:
    failed: FailedCopies = {}
    for p, e, w in info.commit.lost_copies if info.commit else ():
        failed.setdefault(p, []).append((e, w))
    return failed


class _Addresses:
    """Worker id -> address for one reply, each built once (a batch names the same workers often)."""

    def __init__(self, state: MasterState) -> None:
        self._workers = state.workers
        self._cache: dict[str, WorkerAddress] = {}

    def __call__(self, wid: str) -> WorkerAddress:
        address = self._cache.get(wid)
        if address is None:
            worker = self._workers.get(wid)
            address = worker.address() if worker is not None else WorkerAddress(wid)  # removed
            self._cache[wid] = address
        return address


def _partition_locations(
    addr: _Addresses, info: ShuffleInfo, partition: int, failed: FailedCopies
) -> PartitionLocations:
    if not 0 <= partition < info.num_partitions:
        raise BadRequest(f"partition {partition} is out of range 0..{info.num_partitions - 1}")
    commit = info.commit
    return PartitionLocations(
        partition,
        tuple(
            PartitionLocation(loc.epoch, addr(loc.primary), addr(loc.replica) if loc.replica else None)
            for loc in info.locations(partition)
        ),
        commit is not None and partition in commit.lost_partitions,
        tuple(failed.get(partition, ())),
        # only once every map has ended (readers wait for that): before, it would cost
        # O(num_mappers) per reply and every later MAPPER_END would change it
        info.declared_maps(partition) if info.all_ended else None,
        info.lost_maps(partition) or None,
    )


def shuffle_reply(info: ShuffleInfo, state: MasterState | None = None) -> ShuffleSummary:
    """A shuffle's summary; with ``state``, also what writers need to push.

    ``workers`` maps every worker of the shuffle to its address, and ``revived``
    lists the current location of each revived partition as
    ``[partition, epoch, primary, replica]``.
    """
    commit = info.commit
    workers = revived = None
    if state is not None:
        known = sorted(wid for wid in info.workers() if wid in state.workers)
        workers = {wid: state.workers[wid].address() for wid in known}
        revived = tuple(
            (p, locs[-1].epoch, locs[-1].primary, locs[-1].replica)
            for p, locs in sorted(info.revivals.items())
        )
    return ShuffleSummary(
        workers=workers,
        revived=revived,
        app_id=info.app_id,
        shuffle_id=info.shuffle_id,
        num_mappers=info.num_mappers,
        num_partitions=info.num_partitions,
        replicate=info.replicate,
        pairs=info.pairs,
        revived_partitions=len(info.revivals),
        mappers_ended=len(info.winners),
        committed=commit is not None,
        lost_partitions=commit.lost_partitions if commit else (),
        total_bytes=commit.total_bytes if commit else 0,
    )


def status_reply(state: MasterState) -> StatusReply:
    """The durable state as admin sees it (the answering service adds ``master``)."""
    return StatusReply(
        state.term,
        state.leader,
        state.seq,
        tuple(worker_row(w) for w in sorted(state.workers.values(), key=lambda w: w.worker_id)),
        tuple(
            AppRow(a.app_id, a.name, len(state.app_shuffles(a.app_id)))
            for a in sorted(state.apps.values(), key=lambda a: a.app_id)
        ),
        tuple(shuffle_reply(s) for _, s in sorted(state.shuffles.items())),
    )


# -- handlers ---------------------------------------------------------------------------------


def _register_worker(state: MasterState, cmd: RegisterWorker, now: float, rng: random.Random) -> Decision:
    old = state.workers.get(cmd.worker_id)
    same = (
        old is not None
        and old.status == WorkerStatus.ACTIVE
        and (old.host, old.control_port, old.push_port, old.replicate_port, old.fetch_port)
        == (cmd.host, cmd.control_port, cmd.push_port, cmd.replicate_port, cmd.fetch_port)
        and (old.slots, old.incarnation) == (cmd.slots, cmd.incarnation)
    )
    reply = RegisterWorkerReply(cmd.worker_id, cmd.incarnation)
    if same:
        return reply, []
    return reply, [
        WorkerRegistered(
            cmd.worker_id,
            cmd.host,
            cmd.control_port,
            cmd.push_port,
            cmd.replicate_port,
            cmd.fetch_port,
            cmd.slots,
            cmd.incarnation,
            now,
        )
    ]


def _worker_heartbeat(state: MasterState, cmd: WorkerHeartbeat, now: float, rng: random.Random) -> Decision:
    worker = state.workers.get(cmd.worker_id)
    if worker is None or worker.incarnation != cmd.incarnation or worker.status == WorkerStatus.LOST:
        # the worker re-registers: it was lost, or the master never knew this incarnation
        raise UnknownWorker(f"worker {cmd.worker_id!r} (incarnation {cmd.incarnation}) must register again")
    if cmd.held is None:
        return WorkerHeartbeatReply(shown_status(worker), worker.excluded), []
    unknown = tuple(k for k in cmd.held if state.shuffle(*k) is None)
    return WorkerHeartbeatReply(shown_status(worker), worker.excluded, unknown), []


def _lose_worker(state: MasterState, cmd: LoseWorker, now: float, rng: random.Random) -> Decision:
    _worker(state, cmd.worker_id)
    if state.workers[cmd.worker_id].status == WorkerStatus.LOST:
        return ChangedReply(False), []
    return ChangedReply(True), [WorkerLost(cmd.worker_id, cmd.reason, now)]


def _exclude_worker(state: MasterState, cmd: ExcludeWorker, now: float, rng: random.Random) -> Decision:
    _worker(state, cmd.worker_id)
    if state.workers[cmd.worker_id].excluded == cmd.excluded:
        return ChangedReply(False), []
    return ChangedReply(True), [WorkerExcluded(cmd.worker_id, cmd.excluded, cmd.reason)]


def _decommission(state: MasterState, cmd: DecommissionWorker, now: float, rng: random.Random) -> Decision:
    _worker(state, cmd.worker_id)
    worker = state.workers[cmd.worker_id]
    if worker.status != WorkerStatus.ACTIVE:
        return DecommissionReply(False, shown_status(worker)), []
    status = WorkerStatus.DRAINED if worker.used_slots == 0 else WorkerStatus.DECOMMISSIONING
    return DecommissionReply(True, status), [WorkerDecommissioning(cmd.worker_id)]


def key_tag(app: str, seq: int, now: float) -> str:
    """The key tag of a new registration of ``app``: 16 hex digits unique to it, as the log
    position ``seq`` is (and ``now`` too, should a log ever start again from nothing).
    Not secret: the key needs the cluster secret too. Drawn without ``rng``, so placements
    stay what they were."""
    return hashlib.blake2b(f"{app}\0{seq}\0{now!r}".encode(), digest_size=8).hexdigest()


def _register_app(
    state: MasterState,
    cmd: RegisterApp,
    now: float,
    rng: random.Random,
    max_apps: int | None = None,
    tenant: str = DEFAULT_TENANT,
) -> Decision:
    if cmd.app_id is not None:
        existing = state.apps.get(cmd.app_id)
        if existing is not None:
            if existing.name != cmd.name:
                # not a retry of that registration: an app id names one app (PROTOCOL §4)
                raise Conflict(
                    f"app {cmd.app_id} is registered with name {existing.name!r}, not {cmd.name!r}",
                    {"app_id": cmd.app_id, "name": existing.name},
                )
            if existing.tenant != tenant:
                raise Unauthorized(f"app {cmd.app_id} belongs to another tenant")
            return RegisterAppReply(cmd.app_id, cmd.name, key_tag=existing.key_tag), []
    # a retry of a registration that went through is answered above, even at the cap
    if max_apps is not None and len(state.apps) >= max_apps:
        raise QuotaExceeded(
            f"{len(state.apps)} apps are registered, the most this master allows (--max-apps {max_apps});"
            " unregister finished apps or raise the cap",
            {"max_apps": max_apps},
        )
    if cmd.app_id is not None:
        new_id = cmd.app_id
    else:
        for _ in range(100):
            new_id = f"{cmd.name[:96]}-{rng.getrandbits(40):010x}"
            if new_id not in state.apps:
                break
        else:  # pragma: no cover - 2**40 ids
            raise Conflict("could not find a free app id")
    # a new key for every registration of an id (PROTOCOL §2.1): the tag is in the event
    tag = key_tag(new_id, state.seq, now)
    reply = RegisterAppReply(new_id, cmd.name, key_tag=tag)
    return reply, [AppRegistered(new_id, cmd.name, now, tenant, key_tag=tag)]


def _app_heartbeat(state: MasterState, cmd: AppHeartbeat, now: float, rng: random.Random) -> Decision:
    _app(state, cmd.app_id)
    return AppHeartbeatReply(cmd.app_id), []


def _unregister_app(state: MasterState, cmd: UnregisterApp, now: float, rng: random.Random) -> Decision:
    if cmd.app_id not in state.apps:
        return ChangedReply(False), []  # idempotent: a retried unregister is not an error
    return ChangedReply(True), [AppUnregistered(cmd.app_id)]


def _expire_app(state: MasterState, cmd: ExpireApp, now: float, rng: random.Random) -> Decision:
    if cmd.app_id not in state.apps:
        return ChangedReply(False), []
    return ChangedReply(True), [AppExpired(cmd.app_id, now)]


def _register_shuffle(state: MasterState, cmd: RegisterShuffle, now: float, rng: random.Random) -> Decision:
    _app(state, cmd.app_id)
    existing = _registered(state, cmd)
    if existing is not None:
        if (existing.num_mappers, existing.num_partitions, existing.replicate) != (
            cmd.num_mappers,
            cmd.num_partitions,
            cmd.replicate,
        ):
            raise Conflict(f"shuffle {cmd.app_id}/{existing.shuffle_id} exists with other sizes")
        return shuffle_reply(existing, state), []
    if cmd.shuffle_id is not None:
        sid = cmd.shuffle_id
    else:
        sid = state.apps[cmd.app_id].next_shuffle_id
        while state.shuffle(cmd.app_id, sid) is not None:
            sid += 1
    pairs = place(
        candidates(state, frozenset(cmd.full or ())), cmd.num_partitions, cmd.replicate, rng, loads=cmd.loads
    )
    # the incarnations placed on: a worker restarted before the commit lost these copies' memory
    incarnations = _incarnations(state, {w for pair in pairs for w in pair if w is not None})
    event = ShuffleRegistered(
        cmd.app_id,
        sid,
        cmd.num_mappers,
        cmd.num_partitions,
        cmd.replicate,
        pairs,
        now,
        incarnations,
        cmd.request_id,
    )
    info = ShuffleInfo(
        cmd.app_id, sid, cmd.num_mappers, cmd.num_partitions, cmd.replicate, pairs, now, incarnations
    )
    return shuffle_reply(info, state), [event]


def _registered(state: MasterState, cmd: RegisterShuffle) -> ShuffleInfo | None:
    """The shuffle this command registered before (a retry), by its ``shuffle_id`` or ``request_id``."""
    if cmd.shuffle_id is not None:
        return state.shuffle(cmd.app_id, cmd.shuffle_id)
    if cmd.request_id is not None:
        for info in state.app_shuffles(cmd.app_id):
            if info.request_id == cmd.request_id:
                return info
    return None


def _revive(state: MasterState, cmd: RevivePartition, now: float, rng: random.Random) -> Decision:
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    if not 0 <= cmd.partition < info.num_partitions:
        raise BadRequest(f"partition {cmd.partition} is out of range 0..{info.num_partitions - 1}")
    if info.commit is not None or info.all_ended:
        # a location made now would never be committed: every map has ended, the commit is under way
        raise Conflict(f"shuffle {cmd.app_id}/{cmd.shuffle_id}: every map has ended; nothing can be revived")
    current = info.current(cmd.partition)
    if cmd.epoch > current.epoch:
        raise BadRequest(f"epoch {cmd.epoch} is newer than the current epoch {current.epoch}")
    if cmd.epoch == current.epoch:
        avoid = frozenset(cmd.failed_workers) | frozenset(cmd.full or ())
        pairs = place(candidates(state, avoid), 1, info.replicate, rng)
        primary, replica = pairs[0]
        incarnations = _incarnations(state, {w for w in (primary, replica) if w is not None})
        event = PartitionRevived(
            cmd.app_id,
            cmd.shuffle_id,
            cmd.partition,
            current.epoch + 1,
            primary,
            replica,
            cmd.reason,
            incarnations,
        )
        shadow = ShuffleInfo(
            info.app_id,
            info.shuffle_id,
            info.num_mappers,
            info.num_partitions,
            info.replicate,
            info.pairs,
            info.registered_at,
            info.incarnations,
        )
        shadow.winners = info.winners  # read only: the reply's winners come from the real ones
        shadow.derived = info.derived  # and so do their runs and the declared maps' cache
        shadow.revivals = {cmd.partition: [*info.revivals.get(cmd.partition, [])]}
        shadow.revivals[cmd.partition].append(Location(event.epoch, primary, replica, incarnations))
        return locations_reply(state_with(state, shadow), shadow, cmd.partition), [event]
    return locations_reply(state, info, cmd.partition), []


def _incarnations(state: MasterState, workers: set[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((w, state.workers[w].incarnation) for w in workers))


def state_with(state: MasterState, info: ShuffleInfo) -> MasterState:
    """A shallow view of ``state`` where one shuffle is replaced (for replies)."""
    view = MasterState(state.workers, state.apps, dict(state.shuffles), state.term, state.leader, state.seq)
    view.shuffles[(info.app_id, info.shuffle_id)] = info
    return view


def _report_commit(state: MasterState, cmd: ReportCommit, now: float, rng: random.Random) -> Decision:
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    if info.commit is not None:
        return shuffle_reply(info), []
    if not info.all_ended:
        raise NotCommitted(
            f"shuffle {cmd.app_id}/{cmd.shuffle_id}: {len(info.winners)} of {info.num_mappers} maps ended"
        )
    # With declarations, loss is what the seal check proved (``lost_maps``): an epoch whose
    # copies all failed may have held nothing a winner needs (its pushes were refused and
    # went to the next epoch), and readers prove the batches themselves. Without them
    # (winners from before declarations were logged) an epoch with no copy left is a loss.
    lost = {p for p in lost_epochs(info, cmd.failed_copies) if info.declared_maps(p) is None}
    for p, _, hi in cmd.lost_maps:
        if not 0 <= p < info.num_partitions or hi > info.num_mappers:
            raise BadRequest(f"lost_maps names partition {p} or map {hi - 1}, out of range")
        lost.add(p)
    event = ShuffleCommitted(
        cmd.app_id,
        cmd.shuffle_id,
        tuple(sorted(set(cmd.failed_copies))),
        tuple(sorted(lost)),
        cmd.total_bytes,
        cmd.total_batches,
        now,
        tuple(sorted(set(cmd.lost_maps))),
        empty_copies(info, cmd.empty_copies, cmd.failed_copies),
    )
    reply = replace(
        shuffle_reply(info), committed=True, lost_partitions=tuple(sorted(lost)), total_bytes=cmd.total_bytes
    )
    return reply, [event]


def _get_locations(state: MasterState, cmd: GetLocations, now: float, rng: random.Random) -> Decision:
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    return locations_reply(state, info, cmd.partition), []


def _get_locations_batch(
    state: MasterState, cmd: GetLocationsBatch, now: float, rng: random.Random
) -> Decision:
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    return locations_batch_reply(state, info, cmd.partitions), []


def _get_shuffle(state: MasterState, cmd: GetShuffle, now: float, rng: random.Random) -> Decision:
    return shuffle_reply(_shuffle(state, cmd.app_id, cmd.shuffle_id), state), []


def _unregister_shuffle(
    state: MasterState, cmd: UnregisterShuffle, now: float, rng: random.Random
) -> Decision:
    if state.shuffle(cmd.app_id, cmd.shuffle_id) is None:
        return ChangedReply(False), []
    return ChangedReply(True), [ShuffleUnregistered(cmd.app_id, cmd.shuffle_id)]


def _report_offload(state: MasterState, cmd: ReportOffload, now: float, rng: random.Random) -> Decision:
    """Log the copies not recorded yet; a shuffle or worker gone meanwhile changes nothing."""
    info = state.shuffle(cmd.app_id, cmd.shuffle_id)
    if info is None or cmd.worker_id not in state.workers:
        return ChangedReply(False), []
    known = set(info.offloaded)
    new = tuple(c for c in cmd.copies if tuple(c) not in known)
    if not new:
        return ChangedReply(False), []
    return ChangedReply(True), [CopiesOffloaded(cmd.worker_id, cmd.app_id, cmd.shuffle_id, new)]


def _status(state: MasterState, cmd: Status, now: float, rng: random.Random) -> Decision:
    return status_reply(state), []


def _take_over(state: MasterState, cmd: TakeOver, now: float, rng: random.Random) -> Decision:
    if cmd.term <= state.term:
        raise Conflict(f"term {cmd.term} is not newer than the logged term {state.term}")
    return TakeOverReply(cmd.term), [LeaderChanged(cmd.term, cmd.leader)]


def _ping(state: MasterState, cmd: Ping, now: float, rng: random.Random) -> Decision:
    return PingReply(True, state.term, round(now * 1_000_000)), []


_HANDLERS: dict[type[Command], Callable[[MasterState, Any, float, random.Random], Decision]] = {
    Ping: _ping,
    RegisterWorker: _register_worker,
    WorkerHeartbeat: _worker_heartbeat,
    LoseWorker: _lose_worker,
    ExcludeWorker: _exclude_worker,
    DecommissionWorker: _decommission,
    RegisterApp: _register_app,
    AppHeartbeat: _app_heartbeat,
    UnregisterApp: _unregister_app,
    ExpireApp: _expire_app,
    RegisterShuffle: _register_shuffle,
    RevivePartition: _revive,
    MapperEnd: end_map,
    MapperEndBatch: end_maps,
    ReportCommit: _report_commit,
    ReportOffload: _report_offload,
    GetLocations: _get_locations,
    GetLocationsBatch: _get_locations_batch,
    GetShuffle: _get_shuffle,
    UnregisterShuffle: _unregister_shuffle,
    Status: _status,
    TakeOver: _take_over,
    RerunMaps: rerun_maps,
    GetLostMaps: get_lost_maps,
}


def decide(
    state: MasterState,
    command: Command,
    now: float,
    rng: random.Random,
    *,
    max_apps: int | None = None,
    quotas: QuotaContext | None = None,
    validated: bool = False,
) -> Decision:
    """Decide one command against ``state`` (which is not changed).

    Parameters:
        validated: the caller has run ``command.validate()`` already (``decode_command`` does).
        max_apps: the cap on live apps a ``RegisterApp`` checks (None: no cap).
        quotas: tenants and their quotas (``croupier.core.quotas``; None: one tenant,
            ``default``, unlimited): ``RegisterApp`` finds its tenant from its token, a new
            ``RegisterShuffle`` is checked against its tenant's quotas.

    Returns:
        The reply body and the events to log before replying.

    Raises:
        CroupierError: the command is refused; nothing is logged. ``QuotaExceeded``: a new
            app past ``max_apps``, or a new shuffle past its tenant's quotas.
            ``Unauthorized``: a tenant token missing or wrong.
    """
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise BadRequest(f"the master does not handle {type(command).__name__}")
    if not validated:
        command.validate()
    if isinstance(command, RegisterApp):
        tenant = resolve_tenant(quotas.table if quotas else None, command.tenant_token)
        return _register_app(state, command, now, rng, max_apps, tenant)
    if isinstance(command, RegisterShuffle) and quotas is not None and _registered(state, command) is None:
        check_shuffle(state, command.app_id, command.num_partitions, quotas)  # a retry is never refused
    return handler(state, command, now, rng)
