"""``MasterFront``: the RPC side of a master, shared by the embedded and the HA master.

It owns the RPC server, the liveness ticker and, while this master serves,
the ``MasterActor`` with its ``CommitCoordinator``. Requests are decoded on
the RPC server's thread and collected into a burst; after each burst the
server calls ``on_batch_end`` and the whole burst goes to the actor as one
``SubmitMany``. When no actor serves (an HA follower, or a master that is
starting or stopping) ``when_idle`` answers instead.

The HA master drives it through the ``croupier.ha.leadership.Seat`` methods
(``take_seat``, ``stop_writes``, ``reload``, ``leave_seat``).

State:
    _actor / _coordinator   the serving actor and its coordinator, or None; set and cleared
                            by ``serve``/``take_seat``/``leave_seat`` (the owner's thread),
                            read by the RPC server thread and the ticker
    _burst                  the commands read in the current burst (RPC server thread only)

Threads: ``_on_request`` and ``_flush`` run on the RPC server's thread, the
ticker on ``<name>-ticker``, reply callbacks on the actor's committer thread.

Usage::

    front = MasterFront("tcp://127.0.0.1:0", config=MasterConfig()).start()
    front.serve(MemoryEventLog())              # the embedded master: serve at once
    ...
    front.stop()
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar

import blake3
import pykka

from croupier.actors.commit_coordinator import CommitCoordinator
from croupier.actors.master_actor import (
    BurstGate,
    Describe,
    GetStatus,
    Inspect,
    MasterActor,
    Ordered,
    Reload,
    ReplyFn,
    SetWritable,
    Submit,
    SubmitMany,
    Tick,
    UnsignedRegisterApp,
)
from croupier.actors.object_janitor import ObjectJanitor
from croupier.core.access import Access, Scheme, access_of, public_status
from croupier.core.codec import to_json
from croupier.core.commands import (
    COMMAND_TYPES,
    INTERNAL_TYPES,
    AppHeartbeat,
    Command,
    RegisterApp,
    Status,
    TakeOver,
    UnregisterApp,
    decode_command,
)
from croupier.core.config import MasterConfig
from croupier.core.enums import MasterRole
from croupier.core.errors import CroupierError, Unavailable, UnknownApp
from croupier.core.replies import ChangedReply, MasterInfo
from croupier.core.state import MasterState
from croupier.core.wire import MsgType
from croupier.ha.eventlog import EventLog
from croupier.transports.auth import Signer, verifier_for
from croupier.transports.curve import CurveServer
from croupier.transports.objstore import open_object_store
from croupier.transports.rpc import Request, Responder, RpcServer
from croupier.transports.secret import AppTags, ClusterSecret

__all__ = ["IdleAnswer", "MasterFront"]

log = logging.getLogger(__name__)

R = TypeVar("R")

IdleAnswer = Callable[[Command], dict[str, Any]]
"""Answers a command while no actor serves: returns a reply body, or raises a ``CroupierError``."""

ActorRef = pykka.ActorRef[MasterActor]


def _starting_or_stopping(_command: Command) -> dict[str, Any]:
    raise Unavailable("the master is starting or stopping")


class MasterFront:
    """Parameters:
    listen: the RPC bind endpoint (``tcp://HOST:PORT``; port 0 = any free port).
    name: the RPC server's name (thread names, logs).
    config: timeouts and intervals.
    clock: wall-clock seconds (the actor's and the ticker's).
    rng: randomness for placement and ids.
    when_idle: answers commands while no actor serves (default: ``UNAVAILABLE``).
    ensemble: fields merged into the ``master`` object of a served ``STATUS`` reply.
    takeover_timeout: how long ``take_seat`` waits for ``TakeOver`` to be logged.
    curve: serve CURVE with this key pair, and talk CURVE to the workers (``--curve``).
    secret: the cluster secret: requests are checked against it (PROTOCOL §2.1) and the
        master's own requests to workers are member-signed; None accepts every request.
    identity: where the cluster's log lives (the same on every master of the cluster): with
        the secret, the cluster's id in the object store's sweep claims (``core.sweep``).
    """

    def __init__(
        self,
        listen: str,
        *,
        name: str = "master",
        config: MasterConfig | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        when_idle: IdleAnswer = _starting_or_stopping,
        ensemble: Callable[[], dict[str, Any]] | None = None,
        takeover_timeout: float = 30.0,
        curve: CurveServer | None = None,
        secret: ClusterSecret | None = None,
        identity: str = "",
    ) -> None:
        self._secret = secret
        self._identity = identity
        self.config = config or MasterConfig()
        self._curve = curve
        self._listen = listen
        self._name = name
        self._clock = clock
        self._rng = rng
        self._when_idle = when_idle
        self._ensemble = ensemble
        self._takeover_timeout = takeover_timeout
        self._server: RpcServer | None = None
        self._ticker: threading.Thread | None = None
        self._stop_ticker = threading.Event()
        self._actor: ActorRef | None = None
        self._coordinator: CommitCoordinator | None = None
        self._tags = AppTags()  # every registered app's key tag, kept by the serving actor
        self._burst: list[tuple[Command, ReplyFn | None]] = []
        # the serving actor and its gate, for ``_flush`` (read together: one reference)
        self._serving: tuple[ActorRef, BurstGate] | None = None
        self.watch: Callable[[Request, Responder], Responder] = lambda _request, responder: responder
        self.http_url: str | None = None  # this master's HTTP endpoint, shown in STATUS (croupier.ops)

    @property
    def curve(self) -> CurveServer | None:
        """The CURVE key pair it serves with, or None (plaintext)."""
        return self._curve

    @property
    def url(self) -> str:
        """The bound RPC URL (known after ``start``)."""
        assert self._server is not None, "start() first"
        return self._server.url

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        """Bind the RPC server (so that ``url`` is known) and start the ticker; no actor yet."""
        self._server = RpcServer(
            self._listen,
            self._on_request,
            name=self._name,
            allowed_types=[t for t in COMMAND_TYPES if t not in INTERNAL_TYPES],
            on_batch_end=self._flush,
            max_peer_reply_bytes=self.config.max_peer_reply_bytes,
            curve=self._curve,
            verifier=verifier_for(self._secret, app_tags=self._tag_of, unknown_app=self._unknown_app),
        )
        self._server.start()
        if self.config.sweep_interval > 0:
            self._ticker = threading.Thread(target=self._tick_loop, name=f"{self._name}-ticker", daemon=True)
            self._ticker.start()
        return self

    def stop(self) -> None:
        """Stop the ticker, the server and the actor (its queued commits finish). Idempotent."""
        self._stop_ticker.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._server is not None:
            self._server.stop()
        self.leave_seat()

    # -- the actor ---------------------------------------------------------------------------
    def serve(self, event_log: EventLog) -> None:
        """Start the actor over ``event_log`` and serve every command with it (the embedded master).

        Raises:
            CroupierError: the log could not be loaded (``LogCorrupted``, ``Unavailable``).
        """
        kind = getattr(event_log, "kind", type(event_log).__name__)  # a wrapper names what it wraps
        info = {"role": str(MasterRole.STANDALONE), "url": self.url, "log": kind}
        if self.http_url is not None:
            info["http"] = self.http_url
        actor, coordinator, gate = self._start_actor(event_log, info, None, None)
        self._actor, self._coordinator = actor, coordinator
        self._serving = (actor, gate)

    def take_seat(
        self, term: int, event_log: EventLog, on_log_error: Callable[[CroupierError], None]
    ) -> None:
        """Start the actor over the fenced ``event_log``, log ``TakeOver(term)``, then serve.

        Requests keep getting ``when_idle``'s answer until the take-over is logged.

        Raises:
            CroupierError: ``TakeOver`` could not be logged (or not within ``takeover_timeout``);
                the actor is stopped again.
        """
        info = {
            "role": str(MasterRole.LEADER),
            "url": self.url,
            "log": getattr(event_log, "kind", type(event_log).__name__),
            "term": term,
        }
        if self.http_url is not None:
            info["http"] = self.http_url
        actor, coordinator, gate = self._start_actor(event_log, info, on_log_error, self._takeover_timeout)
        done: queue.SimpleQueue[CroupierError | None] = queue.SimpleQueue()
        take_over = Submit(TakeOver(term, self.url), lambda _body, error: done.put(error))
        try:
            # ask, not tell: an actor whose start failed (the log unreadable) answers ActorDeadError
            actor.ask(take_over, timeout=self._takeover_timeout)
            error = done.get(timeout=self._takeover_timeout)
        except (pykka.ActorDeadError, pykka.Timeout, queue.Empty) as exc:
            _stop(actor, coordinator)
            raise Unavailable(f"the take-over of term {term} was not logged: {exc!r}") from exc
        if error is not None:
            _stop(actor, coordinator)
            raise error
        self._actor, self._coordinator = actor, coordinator
        self._serving = (actor, gate)

    def _start_actor(
        self,
        event_log: EventLog,
        info: dict[str, Any],
        on_log_error: Callable[[CroupierError], None] | None,
        load_timeout: float | None,
    ) -> tuple[ActorRef, CommitCoordinator, BurstGate]:
        """Start the actor and wait until it has loaded the log; its gate (``BurstGate``) too.

        Raises:
            CroupierError: the load failed (``LogCorrupted``, ``Unavailable``) or did not end
                within ``load_timeout`` (``Unavailable``).
        """
        actor: ActorRef | None = None

        def submit(command: Command) -> None:
            # the coordinator reports to its own actor, even before that one serves requests
            if actor is not None:
                try:
                    actor.tell(Submit(command, None))
                except pykka.ActorDeadError:
                    log.debug("dropped %s: the master actor has stopped", type(command).__name__)

        worker_curve = self._curve.client() if self._curve is not None else None
        coordinator = CommitCoordinator(
            submit, curve=worker_curve, signer=Signer.member(self._secret), janitor=self._janitor()
        )
        started: pykka.ThreadingFuture[None] = pykka.ThreadingFuture()
        gate = BurstGate()
        actor = MasterActor.start(
            event_log,
            self.config,
            self._clock,
            rng=self._rng,
            info=info,
            coordinator=coordinator,
            on_log_error=on_log_error,
            started=started,
            curve=worker_curve,
            app_tags=self._tags,
            gate=gate,
        )
        try:
            # the load's own error (LogCorrupted, Unavailable), not a dead actor later
            started.get(timeout=load_timeout)
        except CroupierError:
            coordinator.stop()
            raise
        except Exception as exc:  # pykka.Timeout, or a thread that could not start
            coordinator.stop()
            actor.stop(block=False)
            raise Unavailable(f"the master actor did not start: {exc!r}") from exc
        return actor, coordinator, gate

    def _janitor(self) -> ObjectJanitor | None:
        """The object-store janitor of a master run with ``--object-store`` (else None)."""
        cfg = self.config
        if cfg.object_store is None:
            return None
        store = open_object_store(cfg.object_store)
        return ObjectJanitor(
            store, grace=cfg.orphan_grace, interval=cfg.orphan_interval, cluster=self._cluster_id()
        )

    def _cluster_id(self) -> str | None:
        """This cluster's id in sweep claims: from where its log lives (``identity``) and its
        secret, so every master of the cluster has it, across restarts; None without an
        identity (a log in memory: a random id)."""
        if not self._identity:
            return None
        key = self._secret.member_key if self._secret is not None else b""
        return blake3.blake3(key + b"\0" + self._identity.encode("utf-8")).hexdigest()[:16]

    def stop_writes(self, reason: str) -> None:
        """Refuse commands that log events (ZooKeeper unreachable); reads go on."""
        self._order(SetWritable(False, reason))

    def reload(self, reason: str) -> None:
        """Rebuild the actor's state from the log, then accept writes again."""
        self._order(Reload(reason))

    def _order(self, message: Reload | SetWritable) -> None:
        """Tell the actor ``message``; the bursts read after this wait behind it (the gate)."""
        actor, serving = self._actor, self._serving
        if actor is None:
            return
        if serving is not None:
            serving[1].order()
        actor.tell(Ordered(message))

    def leave_seat(self) -> None:
        """Stop serving: stop the coordinator and the actor (idempotent)."""
        self._serving = None
        actor, self._actor = self._actor, None
        coordinator, self._coordinator = self._coordinator, None
        if actor is not None and coordinator is not None:
            _stop(actor, coordinator)

    def tick(self, now: float | None = None) -> None:
        """Run one liveness sweep (the ticker does this every ``sweep_interval``)."""
        actor = self._actor
        if actor is not None:
            actor.tell(Tick(self._clock() if now is None else now))

    def describe(self) -> MasterInfo:
        """The actor's soft state, for tests and the CLI.

        Raises:
            Unavailable: no actor serves.
        """
        actor = self._actor
        if actor is None:
            raise Unavailable("this master is not serving")
        info: MasterInfo = actor.ask(Describe(), block=True)
        return info

    def status(self) -> dict[str, Any] | None:
        """STATUS as an admin would get it, as JSON values (the HTTP API and the metrics);
        None when no actor serves (a follower, or starting or stopping)."""
        status: dict[str, Any] | None = self._ask(GetStatus())
        coordinator = self._coordinator
        if status is not None and coordinator is not None and coordinator.janitor is not None:
            # the object store's cleanup (soft counters of this leadership; not in STATUS)
            status["object_janitor"] = coordinator.janitor.stats()
        return status

    def inspect(self, fn: Callable[[MasterState], R]) -> R | None:
        """``fn(state)`` on the serving actor's thread (the HTTP API); None when no actor serves."""
        result: R | None = self._ask(Inspect(fn))
        return result

    def _ask(self, message: Describe | GetStatus | Inspect) -> Any:
        actor = self._actor
        if actor is None:
            return None
        try:
            return actor.ask(message, block=True, timeout=10.0)
        except pykka.ActorDeadError:
            return None

    def _tick_loop(self) -> None:
        while not self._stop_ticker.wait(self.config.sweep_interval):
            self.tick()

    # -- requests (the RPC server's thread) --------------------------------------------------
    def _tag_of(self, app_id: str) -> str | None:
        """The key tag of ``app_id``'s registration; None when not serving or unknown."""
        return self._tags.get(app_id) if self._actor is not None else None

    def _unknown_app(self, msg_type: int, app_id: str) -> CroupierError | None:
        """The answer to a request signed by an app this master does not know: ``UNKNOWN_APP``
        when it serves (``UNREGISTER_APP`` is answered by ``_on_request``: a retry is no
        error), else what it answers every request then (``NOT_LEADER``, ...)."""
        if self._actor is not None:
            return None if msg_type == MsgType.UNREGISTER_APP else UnknownApp(f"unknown app {app_id!r}")
        try:
            self._when_idle(AppHeartbeat(app_id))
        except CroupierError as exc:
            return exc
        return Unavailable("the master is starting or stopping")

    def _on_request(self, request: Request, responder: Responder) -> None:
        # decode here, decide on the actor thread
        command = decode_command(request.msg_type, request.body)
        if request.scheme is Scheme.NONE and access_of(request.msg_type) is not Access.OPEN:
            # signed by an app unknown when it was checked (Verifier): never acted on
            if isinstance(command, UnregisterApp):
                responder.ok(to_json(ChangedReply(False)))  # idempotent: a retry is no error
            else:
                responder.error(UnknownApp(f"unknown app {request.body.get('app_id')!r}"))
            return
        if isinstance(command, RegisterApp) and command.app_id is not None and request.scheme is Scheme.NONE:
            # unsigned: it may create this app, but not repeat it (that would hand out its key)
            command = UnsignedRegisterApp(command.name, command.app_id, command.tenant_token)
        public = isinstance(command, Status) and request.scheme is not Scheme.MEMBER
        responder = self.watch(request, responder)  # metrics (croupier.ops); the identity by default
        if self._actor is None:
            body = self._when_idle(command)
            responder.ok(public_status(body) if public else body)
            return
        self._burst.append((command, self._replier(command, responder, public)))

    def _replier(self, command: Command, responder: Responder, public: bool) -> ReplyFn:
        ensemble = self._ensemble if isinstance(command, Status) else None
        register = isinstance(command, RegisterApp)
        secret = self._secret

        def reply(body: dict[str, Any] | None, error: CroupierError | None) -> None:
            if error is not None:
                responder.error(error)
                return
            if ensemble is not None and body is not None:
                body["master"].update(ensemble())
            if register and body is not None:
                tag = str(body.pop("key_tag", None) or "")  # the master's own: never sent
                if secret is not None and "app_key" not in body:
                    # REGISTER_APP hands the app its key (PROTOCOL §2.1); workers derive the same one
                    body["app_key"] = secret.app_key(str(body["app_id"]), tag).hex()
            responder.ok(public_status(body) if public and body is not None else body)

        return reply

    def _flush(self) -> None:
        # after each burst the server read: decided here, or one actor message per burst
        if not self._burst:
            return
        burst, self._burst = self._burst, []
        serving = self._serving
        if serving is not None:
            actor, gate = serving
            # decided here when the actor is idle (no thread hand-off), else queued to it
            if gate.run(burst):
                return
            gate.told += 1
            try:
                actor.tell(SubmitMany(burst, validated=True))  # decode_command validated them
                return
            except pykka.ActorDeadError:
                gate.told -= 1
        for _, reply in burst:
            if reply is not None:
                reply(None, Unavailable("this master stepped down or is stopping; retry"))


def _stop(actor: ActorRef, coordinator: CommitCoordinator) -> None:
    coordinator.stop()
    actor.stop(block=True)
