"""``MasterActor``: every command to the master goes through this one actor.

State it owns (all on the actor's pykka thread):
    state       the folded ``MasterState``, including events not yet durable
    soft        worker heartbeats and load scores, app actors (never logged)
    committer   the ``GroupCommitter`` that makes events durable before replies
    reserver    the ``ReservationSender`` (with a coordinator only): a placement's reply
                waits for the placed workers' ``RESERVE`` acks (or its timeout)

Flow of one command: ``decide`` -> ``apply`` each event -> hand the encoded events and the
reply to the committer -> the committer appends the group to the log and only then sends the
reply. Replies therefore leave in command order (but for REGISTER_SHUFFLE and
REVIVE_PARTITION, which then wait for the workers' ``RESERVE`` acks, and for the reads of one
shuffle below), and a reply is never sent for state a crash could take back.

Reads of one shuffle (GET_LOCATIONS, GET_LOCATIONS_BATCH, GET_SHUFFLE) are answered at once,
on this thread, when every event they can show is durable: the last event of their shuffle
and the last event of no shuffle (workers, apps, terms) are at or below the committer's
``durable_seq`` (the log's own answer to its last append). So a read of a quiet shuffle does
not wait behind the group commits of busy ones' MAPPER_ENDs; a read of a shuffle with events
in flight waits for them as before.

If an append fails, the committer refuses everything decided after it, and this
actor reloads its state from the log (``Reload``) before it accepts more.

Start-up: ``on_start`` loads the log and starts one ``AppActor`` (one thread) per registered
app; it settles the ``started`` future either way, so the owner waits for it and stops with
the reason (``LogCorrupted``, ``Unavailable``) instead of serving from an actor that never
started. A registration whose app actor cannot be started (no thread left) is refused with
``UNAVAILABLE`` and logs nothing; ``config.max_apps`` caps the live apps (``QUOTA_EXCEEDED``).

Threads: ``on_receive`` runs on the actor thread. ``submit`` may be called from any thread
(the RPC server's, app actors'). Reply callbacks run on the committer's thread, or the
reserver's for placements.

The ``BurstGate`` (issue 27): while this actor is idle, a burst of requests is decided on
the RPC server's thread that read it, under the gate's lock, which this actor holds while it
handles any message; else the burst comes as one ``SubmitMany``. One writer of the state at a
time, and the commands keep their order.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from typing import Any, cast

import pykka

from croupier.actors.app_actor import AppActor, AppHeartbeatSeen, AppShuffleAdded, AppShuffleRemoved, AppTick
from croupier.actors.burst_gate import BurstGate, ReplyFn
from croupier.actors.commit_coordinator import CommitCoordinator, commit_plan, control_urls
from croupier.actors.master_messages import (
    Describe,
    GetStatus,
    Inspect,
    Ordered,
    Reload,
    SetWritable,
    Submit,
    SubmitMany,
    Tick,
    UnsignedRegisterApp,
    answer_now,
    deliver,
    with_timeouts,
)
from croupier.actors.reservations import ReservationSender, Send, reserves, shuffle_reserves
from croupier.core.codec import to_json
from croupier.core.commands import (
    AppHeartbeat,
    Command,
    DirReport,
    GetLocations,
    GetLocationsBatch,
    GetShuffle,
    LoseWorker,
    MapperEnd,
    MapperEndBatch,
    RegisterApp,
    RegisterShuffle,
    RegisterWorker,
    RerunMaps,
    RevivePartition,
    Status,
    WorkerHeartbeat,
    full_workers,
)
from croupier.core.config import MasterConfig
from croupier.core.decide import Decision, decide
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError, InternalError, Unauthorized, Unavailable
from croupier.core.events import (
    AppExpired,
    AppRegistered,
    AppUnregistered,
    Event,
    MapperEnded,
    MappersEnded,
    ShuffleRegistered,
    ShuffleUnregistered,
    WorkerLost,
    WorkerRegistered,
    event_object,
)
from croupier.core.offload_progress import offload_row
from croupier.core.placement import ewma, load_score
from croupier.core.quotas import QuotaContext, default_quotas, sum_pushed, tenant_rows
from croupier.core.replies import (
    MasterInfo,
    StatusReply,
)
from croupier.core.snapshot_policy import SnapshotPolicy
from croupier.core.state import MasterState, apply, encode_snapshot
from croupier.ha.eventlog import EventLog
from croupier.ha.group_commit import GroupCommitter
from croupier.ha.recovery import load_state
from croupier.transports._json import encode_json
from croupier.transports.curve import CurveClient
from croupier.transports.log_context import LOG_FIELDS, enter, lazy_ids
from croupier.transports.secret import AppTags

__all__ = [
    "BurstGate",
    "Describe",
    "GetStatus",
    "Inspect",
    "MasterActor",
    "Ordered",
    "Reload",
    "ReplyFn",
    "SetWritable",
    "Submit",
    "SubmitMany",
    "Tick",
    "UnsignedRegisterApp",
]

log = logging.getLogger(__name__)

_READS_QUOTAS = (RegisterApp, RegisterShuffle, Status)
# Reads of one shuffle: answered at once when every event they can show is durable (the
# others' replies wait for the group commits queued before them, whatever they read)
_SHUFFLE_READS = (GetLocations, GetLocationsBatch, GetShuffle)
_TOUCHED_MAX = 10_000
_WORKER_BEATS = (WorkerHeartbeat, RegisterWorker)
_ENDS = frozenset({MapperEnd, MapperEndBatch})  # the hot commands: ``_end_map``
_PLACES = (RegisterShuffle, RevivePartition, RerunMaps)
_ENRICHED = (RegisterShuffle, RevivePartition)
_PUSHED_READERS = (RegisterShuffle, Status)


class MasterActor(pykka.ThreadingActor):
    """The master's state machine shell.

    Parameters:
        log: an open event log; this actor reads it at start and after failures.
        config: timeouts, snapshot interval, group commit size.
        clock: wall-clock seconds (passed in so tests control time).
        rng: randomness for placement and app ids.
        info: ``MasterInfo`` fields the service knows (role, URL, log kind, term) for ``Status`` replies.
        started: settled once ``on_start`` ends: ``None`` when serving, else the load's exception.
        curve: the reservations talk CURVE to the workers, with this server key.
        app_tags: kept equal to the registered apps' key tags (the front's verifier reads it).
        gate: lets the RPC server's thread decide bursts while this actor is idle (issue 27).
    """

    def __init__(
        self,
        log: EventLog,
        config: MasterConfig,
        clock: Callable[[], float],
        *,
        rng: random.Random | None = None,
        info: dict[str, Any] | None = None,
        coordinator: CommitCoordinator | None = None,
        on_log_error: Callable[[CroupierError], None] | None = None,
        started: pykka.Future[None] | None = None,
        curve: CurveClient | None = None,
        app_tags: AppTags | None = None,
        gate: BurstGate | None = None,
    ) -> None:
        super().__init__()
        self._gate = gate if gate is not None else BurstGate()
        self._app_tags = app_tags if app_tags is not None else AppTags()
        self._curve = curve
        self._started = started
        self._coordinator = coordinator
        self._reserver: ReservationSender | None = None
        self._on_log_error = on_log_error
        self._writable = True
        self._unwritable_reason = ""
        self._log = log
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._info = dict(info or {})
        self.state = MasterState()
        self._committer = GroupCommitter(
            log, max_events=config.max_group_events, on_failure=self._committer_failed
        )
        self._worker_seen: dict[str, float] = {}
        self._worker_load: dict[str, float] = {}
        self._worker_dirs: dict[str, tuple[DirReport, ...]] = {}  # the last heartbeat's dirs
        self._overflows: set[str] = set()  # workers whose full disks spill to a bucket: not full
        self._worker_http: dict[str, int] = {}  # worker -> its HTTP port (soft: from heartbeats)
        self._pushed: dict[str, dict[tuple[str, int], int]] = {}  # worker -> its last ``pushed`` report
        self._apps: dict[str, pykka.ActorRef[AppActor]] = {}
        self._grace_until = 0.0
        self._snapshots = SnapshotPolicy(config.snapshot_every)  # the interval grows with the state
        # seq of the last event folded per (app, shuffle), and of the last one of no shuffle
        self._touched: dict[tuple[str, int], int] = {}
        self._touched_all = 0
        self.commands = 0

    # -- lifecycle (actor thread) ---------------------------------------------------------
    def on_start(self) -> None:
        try:
            self._load()
            self._committer.durable_seq = self.state.seq
            self._committer.start()
            if self._coordinator is not None:  # side effects on workers: commits, and reservations
                self._reserver = ReservationSender(
                    curve=self._curve, signer=getattr(self._coordinator, "signer", None)
                )
        except BaseException:
            # pykka calls neither on_stop nor on_failure when on_start raises
            self._stop_apps()
            if self._started is not None:
                self._started.set_exception()
            raise
        with self._gate.lock:
            self._gate.open(self._handle_burst)
        if self._started is not None:
            self._started.set(None)

    def on_stop(self) -> None:
        with self._gate.lock:  # no burst decided on another thread from now on
            self._gate.open(None)
        self._committer.stop()
        self._stop_reserver()
        self._stop_apps()

    def on_failure(self, *args: Any) -> None:
        with self._gate.lock:
            self._gate.open(None)
        self._committer.stop()
        self._stop_reserver()
        self._stop_apps()

    def _stop_reserver(self) -> None:
        # after the committer: no placement reply is handed to it any more; waiting ones go now
        if self._reserver is not None:
            self._reserver.stop()
            self._reserver = None

    def _load(self) -> None:
        now = self._clock()
        self.state = load_state(self._log)
        self._app_tags.reset({a.app_id: a.key_tag for a in self.state.apps.values()})
        self._snapshots.taken(self.state.seq, self.state.rows(), self._committer.groups)
        self._grace_until = now + self._config.takeover_grace
        self._worker_seen = {wid: now for wid in self.state.workers}
        self._stop_apps()
        for app in self.state.apps.values():
            self._start_app(app.app_id, now)
            for info in self.state.app_shuffles(app.app_id):
                self._apps[app.app_id].tell(AppShuffleAdded(info.shuffle_id))
        if self._coordinator is not None:
            self._coordinator.apps_loaded(self.state.apps)
            for worker in self.state.workers.values():
                self._coordinator.set_lost(worker.worker_id, worker.status == WorkerStatus.LOST)
        for info in self.state.shuffles.values():
            if info.all_ended and info.commit is None:
                self._start_commit(info.app_id, info.shuffle_id)
        log.info(
            "master state loaded at seq %d: %d workers, %d apps, %d shuffles",
            self.state.seq,
            len(self.state.workers),
            len(self.state.apps),
            len(self.state.shuffles),
        )

    def _start_app(self, app_id: str, now: float) -> None:
        """Start the app's actor (one thread).

        Raises:
            Unavailable: no thread could be started (a pids or thread limit).
        """
        try:
            self._apps[app_id] = AppActor.start(app_id, now, self._config.app_timeout, self._submit_internal)
        except RuntimeError as exc:  # "can't start new thread"
            raise Unavailable(
                f"cannot start the actor (a thread) of app {app_id}: {exc}; {len(self._apps)} app actors"
                " run (is a pids or thread limit reached?); retry later",
                {"apps": len(self._apps)},
            ) from exc

    def _stop_apps(self) -> None:
        for ref in self._apps.values():
            ref.stop(block=True)
        self._apps.clear()

    def _submit_internal(self, command: Command) -> None:
        self.actor_ref.tell(Submit(command, None))

    def _committer_failed(self, error: CroupierError) -> None:
        # on the committer's thread: stop writing at once, then reload on the actor thread
        self._writable = False
        log.error("event log append failed (%s); reloading state from the log", error)
        if self._on_log_error is not None:
            self._on_log_error(error)
        self.actor_ref.tell(Reload(str(error)))

    # -- messages -------------------------------------------------------------------------
    def on_receive(self, message: Any) -> Any:
        with self._gate.lock:  # the state's one writer (the gate may decide bursts elsewhere)
            return self._receive(message)

    def _handle_burst(self, items: list[tuple[Command, ReplyFn | None]], validated: bool = True) -> None:
        """Decide a burst read together (under the gate's lock, on any thread)."""
        with self._committer.burst():  # one hand-off to the committer per burst
            for command, reply in items:
                self._handle(command, reply, validated)

    def _receive(self, message: Any) -> Any:
        match message:
            case Submit(command, reply):
                self._handle(command, reply)
            case SubmitMany(items, validated):
                try:
                    self._handle_burst(items, validated)
                finally:
                    self._gate.handled += 1
            case Ordered(order):
                try:
                    return self._receive(order)
                finally:
                    self._gate.obeyed += 1
            case Tick(now):
                self._sweep(now)
            case Reload(reason):
                try:
                    self._load()
                except CroupierError as exc:
                    # the log is unreachable (ZooKeeper down): keep serving reads, refuse writes
                    self._writable = False
                    self._unwritable_reason = f"the event log cannot be read: {exc.message}"
                    log.error("reload after %r failed: %s", reason, exc)
                    return None
                self._committer.durable_seq = max(self._committer.durable_seq, self.state.seq)
                self._committer.reset()
                self._writable = True
                log.warning("state reloaded from the log after: %s", reason)
            case SetWritable(writable, reason):
                self._writable = writable
                self._unwritable_reason = reason
            case Describe():
                return self._master_info()
            case GetStatus():
                return self._status()
            case Inspect(fn):
                return fn(self.state)
            case _:
                log.warning("MasterActor ignored unknown message %r", message)
        return None

    def _handle(self, command: Command, reply: ReplyFn | None, validated: bool = False) -> None:
        """Handle one command; the lines logged meanwhile carry its app and shuffle ids."""
        app, shuffle = getattr(command, "app_id", None), getattr(command, "shuffle_id", None)
        if app is None and shuffle is None:
            self._handle_one(command, reply, validated)
            return
        token = enter(lazy_ids(app, shuffle))
        try:
            self._handle_one(command, reply, validated)
        finally:
            LOG_FIELDS.reset(token)

    def _admit(self, command: Command, reply: ReplyFn | None) -> Command | None:
        """The command to decide, or None when it is refused here (the refusal is queued)."""
        if command.WRITES and not self._writable:
            error = Unavailable(f"the master cannot log events now: {self._unwritable_reason}; retry later")
            self._committer.submit((), deliver(reply, None, error))
            return None
        if isinstance(command, UnsignedRegisterApp):
            if command.app_id in self.state.apps:
                refusal = Unauthorized(
                    f"app {command.app_id} is registered: a repeat must be signed", {"app_id": command.app_id}
                )
                self._committer.submit((), deliver(reply, None, refusal))
                return None
            return RegisterApp(command.name, command.app_id, command.tenant_token)
        return command

    def _handle_one(self, command: Command, reply: ReplyFn | None, validated: bool) -> None:
        if type(command) in _ENDS and self._writable:
            self._end_map(cast("MapperEnd | MapperEndBatch", command), reply, validated)
            return
        self.commands += 1
        admitted = self._admit(command, reply)
        if admitted is None:
            return
        now = self._clock()
        command = self._enrich(admitted, now)
        # only these read the quotas (the others skip building them: MAPPER_END is hot)
        quotas = self._quotas(command) if isinstance(command, _READS_QUOTAS) else None
        decision = self._decide(command, now, reply, validated, quotas)
        if decision is None:
            return
        body, events = decision
        if isinstance(body, StatusReply) and quotas is not None:
            body = self._added(body, quotas)
        body = with_timeouts(body, self._config)
        records = self._fold(command, events, now, reply)
        if records is None:
            return
        if isinstance(command, _WORKER_BEATS):
            self._worker_seen[command.worker_id] = now
        if isinstance(command, WorkerHeartbeat) and command.http_port is not None:
            self._worker_http[command.worker_id] = command.http_port
        if isinstance(command, AppHeartbeat) and command.app_id in self._apps:
            self._apps[command.app_id].tell(AppHeartbeatSeen(now))
        if not events and isinstance(command, _SHUFFLE_READS) and self._reads_durable(command):
            answer_now(reply, to_json(body))
        else:
            self._committer.submit(records, self._after_reserve(command, events, reply, to_json(body)))
        if self._snapshots.due(self.state.seq, self._committer.groups):
            self._snapshot()

    def _end_map(self, command: MapperEnd | MapperEndBatch, reply: ReplyFn | None, validated: bool) -> None:
        """``_handle_one`` for MAPPER_END(_BATCH), the hot ones, without the steps they never take
        (admission of unsigned registrations, soft state, quotas, placements, timeouts)."""
        self.commands += 1
        now = self._clock()
        decision = self._decide(command, now, reply, validated, None)
        if decision is None:
            return
        body, events = decision
        records = self._fold(command, events, now, reply)
        if records is None:
            return
        self._committer.submit_parts(records, deliver(reply, to_json(body), None))  # winners: independent
        if self._snapshots.due(self.state.seq, self._committer.groups):
            self._snapshot()

    def _decide(
        self,
        command: Command,
        now: float,
        reply: ReplyFn | None,
        validated: bool,
        quotas: QuotaContext | None,
    ) -> Decision | None:
        """``decide`` ``command``; None when it is refused (the refusal is queued for ``reply``)."""
        try:
            decision = decide(
                self.state,
                command,
                now,
                self._rng,
                max_apps=self._config.max_apps,
                quotas=quotas,
                validated=validated,
            )
            self._start_app_actors(decision[1], now)
        except CroupierError as exc:
            self._committer.submit((), deliver(reply, None, exc))
            return None
        except Exception as exc:
            log.exception("decide failed on %r", command)
            self._committer.submit((), deliver(reply, None, InternalError(f"master bug: {exc!r}")))
            return None
        return decision

    def _fold(
        self, command: Command, events: list[Event], now: float, reply: ReplyFn | None
    ) -> list[bytes] | None:
        """Apply ``events`` to the state; their log records. None when ``apply`` rejected one
        (a bug in ``decide``): the reply is an internal error and the state is reloaded."""
        records: list[bytes] = []
        try:
            for event in events:
                apply(self.state, event)
                self.state.seq += 1
                records.append(encode_json(event_object(event)))  # what encode_event writes, by orjson
                self._touch(event)
                self._after(event, now)
        except CroupierError as exc:  # InvalidEvent: do not log a partial decision
            log.exception("apply rejected an event decided for %r", command)
            self._committer.submit((), deliver(reply, None, InternalError(str(exc))))
            self.actor_ref.tell(Reload(f"apply rejected an event: {exc}"))
            return None
        return records

    def _snapshot(self) -> None:
        self._snapshots.taken(self.state.seq, self.state.rows(), self._committer.groups)
        # the state's JSON here (a copy); its encoding and compression on the committer's thread
        data = self.state.to_json()
        self._committer.submit_snapshot(self.state.seq, lambda: encode_snapshot(data, encode_json))

    def _touch(self, event: Event) -> None:
        """Note the seq of ``event`` (just folded) against its shuffle, or against everything."""
        app, shuffle = getattr(event, "app_id", None), getattr(event, "shuffle_id", None)
        if app is None or shuffle is None:
            self._touched_all = self.state.seq  # workers, apps, terms: every reply may show them
            return
        if len(self._touched) >= _TOUCHED_MAX:  # forget what is durable: it no longer holds a read
            durable = self._committer.durable_seq
            self._touched = {k: s for k, s in self._touched.items() if s > durable}
        self._touched[(app, shuffle)] = self.state.seq

    def _reads_durable(self, command: Command) -> bool:
        """Whether everything a read of ``command``'s shuffle can show is durable already, so
        that its reply need not wait behind the group commits of other shuffles' events."""
        read: Any = command  # one of _SHUFFLE_READS
        last = max(self._touched.get((read.app_id, read.shuffle_id), 0), self._touched_all)
        return last <= self._committer.durable_seq

    def _after_reserve(
        self, command: Command, events: list[Event], reply: ReplyFn | None, body: dict[str, Any]
    ) -> Callable[[CroupierError | None], None] | None:
        """The log callback of ``command``: a placement's reply waits for the workers' ``RESERVE``
        acks (sent once the events are logged, never from this thread)."""
        sends = self._reserves(command, events)
        reserver = self._reserver
        if not sends or reserver is None:
            return deliver(reply, body, None)

        def logged(log_error: CroupierError | None) -> None:
            if log_error is not None:
                if reply is not None:
                    reply(None, log_error)
                return
            reserver.send(sends, lambda: reply(body, None) if reply is not None else None)

        return logged

    def _reserves(self, command: Command, events: list[Event]) -> list[Send]:
        """The ``RESERVE`` messages that ``command``'s placement needs (built from the state now)."""
        if isinstance(command, RegisterShuffle) and not events and command.shuffle_id is not None:
            # a repeated registration: the first one's reservations may never have arrived
            return shuffle_reserves(self.state, command.app_id, command.shuffle_id)
        if isinstance(command, _PLACES):
            return reserves(self.state, events)
        return []

    def _start_app_actors(self, events: list[Event], now: float) -> None:
        """Start the actors of new apps before their events are folded or logged, so that an
        actor that cannot start refuses only its own registration (``Unavailable``)."""
        for event in events:
            if isinstance(event, AppRegistered):
                self._start_app(event.app_id, now)

    def _quotas(self, command: Command) -> QuotaContext:
        """Tenants, default quotas and (for the commands that use them) the bytes in flight."""
        pushed = sum_pushed(self._pushed) if isinstance(command, _PUSHED_READERS) else {}
        return QuotaContext(self._config.tenants, default_quotas(self._config), pushed)

    def _enrich(self, command: Command, now: float) -> Command:
        """Add soft state the pure core needs: load scores for placement, bytes in flight."""
        if isinstance(command, WorkerHeartbeat) and command.pushed is not None:
            self._pushed[command.worker_id] = {(a, s): n for a, s, n in command.pushed}
        if isinstance(command, WorkerHeartbeat):
            score = load_score(command.disk_util, command.io_wait, command.pending_flush)
            self._worker_load[command.worker_id] = ewma(self._worker_load.get(command.worker_id), score)
            (self._overflows.add if command.overflow else self._overflows.discard)(command.worker_id)
        if isinstance(command, WorkerHeartbeat) and command.dirs is not None:
            self._worker_dirs[command.worker_id] = command.dirs
        if not isinstance(command, _ENRICHED):
            return command
        full = full_workers(self._worker_dirs, self._overflows)
        if isinstance(command, RegisterShuffle):
            return dataclasses.replace(command, loads=dict(self._worker_load), full=full)
        return dataclasses.replace(command, full=full)

    def _after(self, event: Event, now: float) -> None:
        """Keep the app actors and the commit coordinator in step with the fold."""
        match event:  # the hot one first
            case MappersEnded(app_id=app_id, shuffle_id=sid) | MapperEnded(app_id=app_id, shuffle_id=sid):
                info = self.state.shuffle(app_id, sid)
                if info is not None and info.all_ended and info.commit is None:
                    self._start_commit(app_id, sid)
            case WorkerLost(worker_id=wid) | WorkerRegistered(worker_id=wid):
                self._pushed.pop(wid, None)  # a lost or restarted worker holds nothing in memory
                self._worker_dirs.pop(wid, None)  # its next heartbeat reports its disks again
                self._worker_http.pop(wid, None)  # its next heartbeat says it again
                if self._coordinator is not None:
                    if isinstance(event, WorkerRegistered):  # perhaps on other ports
                        self._coordinator.set_lost(wid, False, f"tcp://{event.host}:{event.control_port}")
                    else:
                        self._coordinator.set_lost(wid, True)
            case AppRegistered(app_id=app_id, key_tag=tag):
                self._app_tags.set(app_id, tag)
                if self._coordinator is not None:
                    self._coordinator.app_registered(app_id)
            case AppUnregistered(app_id=app_id) | AppExpired(app_id=app_id):
                self._app_tags.drop(app_id)
                ref = self._apps.pop(app_id, None)
                if ref is not None:
                    ref.stop(block=False)
                self._destroy(app_id, None)
            case ShuffleRegistered(app_id=app_id, shuffle_id=sid):
                if app_id in self._apps:
                    self._apps[app_id].tell(AppShuffleAdded(sid))
            case ShuffleUnregistered(app_id=app_id, shuffle_id=sid):
                if app_id in self._apps:
                    self._apps[app_id].tell(AppShuffleRemoved(sid))
                self._destroy(app_id, sid)
            case _:
                pass

    def _start_commit(self, app_id: str, shuffle_id: int) -> None:
        """Every map has ended: commit the shuffle's files on its workers (off this thread)."""
        plan = commit_plan(self.state, app_id, shuffle_id)
        if self._coordinator is not None and plan is not None:
            self._coordinator.commit(plan)

    def _destroy(self, app_id: str, shuffle_id: int | None) -> None:
        if self._coordinator is not None:
            self._coordinator.destroy(app_id, shuffle_id, control_urls(self.state))

    def _sweep(self, now: float) -> None:
        if now < self._grace_until:
            return
        timeout = self._config.worker_timeout
        for wid, worker in self.state.workers.items():
            if worker.status not in (WorkerStatus.ACTIVE, WorkerStatus.DECOMMISSIONING):
                continue
            silent = now - self._worker_seen.get(wid, now)
            if silent > timeout:
                log.warning("worker %s sent no heartbeat for %.1fs: declaring it lost", wid, silent)
                self._handle(
                    LoseWorker(wid, f"no heartbeat for {silent:.1f}s (timeout {timeout:.1f}s)"), None
                )
        for ref in self._apps.values():
            ref.tell(AppTick(now))
        if self._coordinator is not None:
            self._coordinator.tick(now)

    def _status(self) -> dict[str, Any]:
        command = Status()
        quotas = self._quotas(command)
        body, _ = decide(
            self.state, command, self._clock(), self._rng, max_apps=self._config.max_apps, quotas=quotas
        )
        assert isinstance(body, StatusReply)
        return dict(to_json(self._added(body, quotas)))

    def _added(self, body: StatusReply, quotas: QuotaContext) -> StatusReply:
        """STATUS as the leader answers it: its soft state, the tenants, the offload's progress."""
        offload = offload_row(self.state, self._clock()) if self._config.object_store else None
        tenants = tenant_rows(self.state, quotas)
        return dataclasses.replace(body, master=self._master_info(), tenants=tenants, offload=offload)

    def _master_info(self) -> MasterInfo:
        now = self._clock()
        return MasterInfo(
            **self._info,
            seq=self.state.seq,
            commands=self.commands,
            log_groups=self._committer.groups,
            log_records=self._committer.records,
            in_grace=now < self._grace_until,
            writable=self._writable,
            worker_heartbeat_age={w: round(now - t, 3) for w, t in sorted(self._worker_seen.items())},
            worker_load=dict(sorted(self._worker_load.items())),
            worker_dirs=dict(sorted(self._worker_dirs.items())),
            worker_http=dict(sorted(self._worker_http.items())) or None,
        )
