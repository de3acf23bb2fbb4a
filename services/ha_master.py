"""One member of a master ensemble replicated through ZooKeeper (DESIGN §5).

Roles:

- **follower**: folds the log continuously through a read-only view (hot
  standby). ``STATUS`` is answered from the folded state; every other command
  gets ``NOT_LEADER`` with the leader's URL.
- **leader**: the winner of the election bumps ``/epoch`` (its version is the
  term and the fence), opens the log fenced by that version and its election
  node, loads snapshot + tail in a ``MasterActor``, logs ``LeaderChanged``,
  publishes ``/leader`` and serves. Workers and apps get a grace period before
  any of them is declared lost.

ZooKeeper's session drives the rest: on ``SUSPENDED`` the leader stops accepting
writes (reads go on from its state); on ``RECONNECTED`` it reloads from the log
and writes again; on ``LOST`` (session expired: the election node is gone) it
steps down and joins the election again. A deposed leader's append fails its
fence (``Fenced``) and it steps down.

All role changes run on one control thread; kazoo's listener only queues events.

Usage::

    with HaMasterService("tcp://127.0.0.1:9097", "zk://127.0.0.1:2181/croupier") as m:
        ...
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from croupier.actors.commit_coordinator import CommitCoordinator
from croupier.actors.master_actor import MasterActor, Reload, ReplyFn, SetWritable, Submit, SubmitMany, Tick
from croupier.core.commands import COMMAND_TYPES, INTERNAL_TYPES, Command, Status, TakeOver, decode_command
from croupier.core.config import MasterConfig
from croupier.core.decide import status_reply
from croupier.core.errors import CroupierError, NotLeader, Unavailable
from croupier.core.events import decode_event
from croupier.core.state import MasterState, apply
from croupier.core.urls import parse_master_url
from croupier.ha.election import LeaderElection
from croupier.ha.eventlog import LogTruncated
from croupier.ha.recovery import load_state
from croupier.ha.zklog import Fence, Fenced, ZooKeeperEventLog
from croupier.services._lifecycle import Service
from croupier.transports.rpc import Request, Responder, RpcServer

__all__ = ["HaMasterService"]

log = logging.getLogger(__name__)

FOLLOWER = "follower"
LEADER = "leader"


class HaMasterService(Service):
    """Parameters:
    listen: the RPC bind endpoint (``tcp://HOST:PORT``; port 0 = any free port).
    zk_url: ``zk://h1:p1,h2:p2/root``.
    config: timeouts and intervals (``takeover_grace`` applies after every takeover).
    session_timeout: the ZooKeeper session timeout, seconds.
    """

    def __init__(
        self,
        listen: str,
        zk_url: str,
        *,
        config: MasterConfig | None = None,
        session_timeout: float = 4.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        parsed = parse_master_url(zk_url)
        if parsed.kind != "zk":
            raise ValueError(f"{zk_url}: --ha needs a zk://hosts/root URL")
        self.config = config or MasterConfig()
        self.root = parsed.root
        self._hosts = ",".join(parsed.endpoints)
        self._listen = listen
        self._session_timeout = session_timeout
        self._clock = clock
        self._rng = rng
        self.role = FOLLOWER
        self.term = 0
        self.leader_url = ""
        self._zk: Any = None
        self._server: RpcServer | None = None
        self._election: LeaderElection | None = None
        self._events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._control: threading.Thread | None = None
        self._stop = threading.Event()
        self._actor: Any = None
        self._coordinator: CommitCoordinator | None = None
        self._log: ZooKeeperEventLog | None = None
        self._view: ZooKeeperEventLog | None = None
        self._follower_state = MasterState()
        self._fold_lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._burst: list[tuple[Command, ReplyFn | None]] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Self:
        try:
            self._zk = KazooClient(
                hosts=self._hosts,
                timeout=self._session_timeout,
                connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
                command_retry=KazooRetry(max_tries=5, max_delay=1.0),
            )
            self._zk.add_listener(self._on_zk_state)
            self._zk.start(timeout=30)
            for sub in ("log", "snapshots", "election"):
                self._zk.ensure_path(f"{self.root}/{sub}")
            with contextlib.suppress(NodeExistsError):
                self._zk.create(f"{self.root}/epoch", b"0")
            self._server = RpcServer(
                self._listen,
                self._on_request,
                name="ha-master",
                allowed_types=[t for t in COMMAND_TYPES if t not in INTERNAL_TYPES],
                on_batch_end=self._flush,
            )
            self._server.start()
            self._view = ZooKeeperEventLog(self._zk, self.root, writer=False)
            self._refold(full=True)
            self._view.watch(lambda: self._events.put("log"))
            self._control = threading.Thread(target=self._control_loop, name="ha-control", daemon=True)
            self._control.start()
            self._events.put("contend")
            if self.config.sweep_interval > 0:
                self._ticker = threading.Thread(target=self._tick_loop, name="ha-ticker", daemon=True)
                self._ticker.start()
        except BaseException:
            self.stop()
            raise
        log.info("master %s joined the ensemble at %s%s", self.url, self._hosts, self.root)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._events.put("stop")
        if self._control is not None:
            self._control.join()
            self._control = None
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self._step_down("stopping")
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._election is not None:
            self._election.withdraw()
        if self._view is not None:
            self._view.close()
            self._view = None
        if self._zk is not None:
            try:
                self._zk.stop()
            finally:
                self._zk.close()
            self._zk = None

    # -- ZooKeeper session events (kazoo's thread: only queue) ----------------------------
    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._events.put("suspended")
            if self._actor is not None:
                self._actor.tell(SetWritable(False, "ZooKeeper is unreachable"))
        elif state == KazooState.LOST:
            self._events.put("lost")
        else:
            self._events.put("connected")

    def _on_log_error(self, error: CroupierError) -> None:
        if isinstance(error, Fenced):
            self._events.put("fenced")

    # -- the control thread ---------------------------------------------------------------
    def _control_loop(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._events.get(timeout=0.2)
            except queue.Empty:
                event = "poll"
            if self._stop.is_set():
                return
            try:
                self._on_event(event)
            except Exception as exc:
                log.warning("ha control: %s while handling %r; retrying", exc, event)
                time.sleep(0.2)
                if self.role == FOLLOWER:
                    self._events.put("contend")

    def _on_event(self, event: str) -> None:
        if event == "lost":
            self._step_down("the ZooKeeper session expired")
            if self._election is not None:
                self._election.node = None
            self._events.put("contend")
        elif event == "fenced":
            self._step_down("another master took over (fenced append)")
            if self._election is not None:
                self._election.withdraw()
            self._events.put("contend")
        elif event == "connected":
            if self.role == LEADER and self._actor is not None:
                self._actor.tell(Reload("ZooKeeper is reachable again"))
            self._events.put("contend")
        elif event == "log":
            if self.role == FOLLOWER:
                self._refold()
        elif event in ("contend", "poll"):
            if self.role == FOLLOWER and self._zk.state == KazooState.CONNECTED:
                self._refold()
                self._contend()
            elif self.role == LEADER and self._election is not None and self._election.node is None:
                self._step_down("lost the election node")

    def _contend(self) -> None:
        if self._election is None:
            self._election = LeaderElection(self._zk, self.root, self.url)
        if self._election.node is None:
            self._election.join()
        try:
            leads = self._election.wait(timeout=0.2)
        except NoNodeError:
            self._election.node = None
            return
        self._refresh_leader()
        if leads:
            self._take_over()

    def _refresh_leader(self) -> None:
        try:
            data, _ = self._zk.get(f"{self.root}/leader")
            info = json.loads(data)
            self.leader_url, self.term = str(info["url"]), max(self.term, int(info["term"]))
        except (NoNodeError, ValueError, KeyError):
            self.leader_url = ""

    def _take_over(self) -> None:
        assert self._election is not None and self._election.node is not None
        started = time.monotonic()
        _data, stat = self._zk.get(f"{self.root}/epoch")
        new_stat = self._zk.set(f"{self.root}/epoch", str(stat.version + 1).encode(), version=stat.version)
        term = int(new_stat.version)
        fence = Fence(epoch_version=term, election_node=self._election.node)
        zlog = self._open_writer(fence)
        coordinator = CommitCoordinator(self._submit_internal)
        info = {"role": LEADER, "url": self.url, "log": "ZooKeeperEventLog", "term": term}
        actor = MasterActor.start(
            zlog,
            self.config,
            self._clock,
            rng=self._rng,
            info=info,
            coordinator=coordinator,
            on_log_error=self._on_log_error,
        )
        self._log, self._coordinator, self._actor = zlog, coordinator, actor
        done: queue.SimpleQueue[CroupierError | None] = queue.SimpleQueue()
        actor.tell(Submit(TakeOver(term, self.url), lambda _body, error: done.put(error)))
        error = done.get(timeout=30)
        if error is not None:
            self._step_down(f"could not log the takeover: {error}")
            raise error
        self._zk.create(
            f"{self.root}/leader",
            json.dumps({"url": self.url, "term": term}).encode(),
            ephemeral=True,
            makepath=True,
        ) if not self._zk.exists(f"{self.root}/leader") else self._replace_leader_node(term)
        self.role, self.term, self.leader_url = LEADER, term, self.url
        log.warning(
            "master %s is the leader for term %d (took over in %.3f s)",
            self.url,
            term,
            time.monotonic() - started,
        )

    def _replace_leader_node(self, term: int) -> None:
        data = json.dumps({"url": self.url, "term": term}).encode()
        with contextlib.suppress(NoNodeError):
            self._zk.delete(f"{self.root}/leader")
        self._zk.create(f"{self.root}/leader", data, ephemeral=True, makepath=True)

    def _open_writer(self, fence: Fence) -> ZooKeeperEventLog:
        deadline = time.monotonic() + self._session_timeout * 3 + 5
        while True:
            try:
                return ZooKeeperEventLog(self._zk, self.root, fence=fence, writer=True)
            except CroupierError as exc:
                # the deposed leader's /writer node lingers until its session expires
                if time.monotonic() > deadline:
                    raise
                log.info("waiting for the previous writer to go: %s", exc)
                time.sleep(0.2)

    def _step_down(self, reason: str) -> None:
        was_leader = self.role == LEADER
        self.role = FOLLOWER
        actor, self._actor = self._actor, None
        coordinator, self._coordinator = self._coordinator, None
        zlog, self._log = self._log, None
        if coordinator is not None:
            coordinator.stop()
        if actor is not None:
            actor.stop(block=True)
        if zlog is not None:
            try:
                zlog.close()
            except Exception as exc:
                log.debug("closing the log after stepping down: %s", exc)
        if was_leader:
            try:
                data, _ = self._zk.get(f"{self.root}/leader")
                if json.loads(data).get("url") == self.url:
                    self._zk.delete(f"{self.root}/leader")
            except Exception as exc:
                log.debug("could not remove /leader: %s", exc)
            log.warning("master %s stepped down: %s", self.url, reason)

    # -- followers: hot standby -----------------------------------------------------------
    def _refold(self, *, full: bool = False) -> None:
        view = self._view
        if view is None:
            return
        with self._fold_lock:
            try:
                if full:
                    self._follower_state = load_state(view)
                    return
                for seq, record in view.read(after=self._follower_state.seq):
                    apply(self._follower_state, decode_event(record))
                    self._follower_state.seq = seq
            except LogTruncated:
                self._follower_state = load_state(view)
            except CroupierError as exc:
                log.debug("follower fold deferred: %s", exc)

    # -- requests -------------------------------------------------------------------------
    def _submit_internal(self, command: Command) -> None:
        actor = self._actor
        if actor is not None:
            actor.tell(Submit(command, None))

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.config.sweep_interval):
            actor = self._actor
            if actor is not None:
                actor.tell(Tick(self._clock()))

    def _flush(self) -> None:
        # on the RPC server thread, after each burst it read: one actor message per burst
        actor = self._actor
        if self._burst:
            burst, self._burst = self._burst, []
            if actor is not None:
                actor.tell(SubmitMany(burst))
            else:
                for _, reply in burst:
                    if reply is not None:
                        reply(None, Unavailable("this master stepped down; retry"))

    def _ensemble(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": self.role,
            "url": self.url,
            "term": self.term,
            "leader": self.leader_url,
        }
        try:
            if self._election is not None:
                urls = [url for _, url in self._election.contenders()]
                out["followers"] = [u for u in urls if u != self.leader_url]
        except Exception as exc:
            out["followers_error"] = str(exc)
        return out

    def _on_request(self, request: Request, responder: Responder) -> None:
        command = decode_command(request.msg_type, request.body)
        actor = self._actor
        if self.role == LEADER and actor is not None:

            def reply(body: dict[str, Any] | None, error: CroupierError | None) -> None:
                if error is not None:
                    responder.error(error)
                elif isinstance(command, Status) and body is not None:
                    body["master"].update(self._ensemble())
                    responder.ok(body)
                else:
                    responder.ok(body)

            self._burst.append((command, reply))
            return
        if isinstance(command, Status):
            with self._fold_lock:
                body = status_reply(self._follower_state)
            body["master"] = {**self._ensemble(), "log": "ZooKeeperEventLog", "seq": self._follower_state.seq}
            responder.ok(body)
            return
        if self.leader_url and self.leader_url != self.url:
            raise NotLeader(
                f"{self.url} is a follower; the leader is {self.leader_url}", {"leader": self.leader_url}
            )
        raise Unavailable(f"{self.url} is a follower and no leader is known yet (an election is under way)")
