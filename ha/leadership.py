"""``Leadership``: the HA master's leadership recipe over ZooKeeper (DESIGN §5).

The decisions are ``croupier.ha.roles.RoleMachine``'s; this shell feeds it
stimuli and carries out its actions against ZooKeeper:

- the election (``croupier.ha.election``): join, check, withdraw;
- take-over: bump ``<root>/epoch`` with a versioned set (the new version is
  the term and the fence), open the log fenced by it and the election node,
  let the ``Seat`` (the master's front end) start its actor and log the
  take-over, then publish the ``<root>/leader`` record (ephemeral,
  ``croupier.core.leader_record``);
- step down: the ``Seat`` stops its actor, the writer is closed, and
  ``/leader`` is deleted if it is still this master's;
- followers fold the log through a ``HotStandby``.

kazoo errors are translated here, at the boundary: an action that fails
with ``Unavailable`` is retried by the machine's next poll (every
``poll`` seconds), never in a tight loop; the only other retry waits, for a
bounded time, for a deposed leader's writer lock to go.

Threads: one control thread (``ha-control``) runs the machine and every
action. kazoo's listener, the log watch and the log's error callback only
queue stimuli. ``role``, ``term`` and ``leader_url`` are read from any thread.

Usage::

    zk = KazooClient(hosts="127.0.0.1:2181"); zk.start()
    standby = HotStandby(ZooKeeperEventLog(zk, "/croupier", writer=False))
    leadership = Leadership(zk, "/croupier", "tcp://10.0.0.1:9097", seat, standby).start()
    ...                                   # leadership.role, leadership.describe()
    leadership.stop()                     # steps down and leaves the election
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, Self

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from croupier.core.enums import MasterRole
from croupier.core.errors import CroupierError, NotLeader, Unavailable
from croupier.core.leader_record import decode_leader, encode_leader
from croupier.ha import roles as r
from croupier.ha.election import ElectionNodeGone, LeaderElection
from croupier.ha.eventlog import EventLog, LogLocked
from croupier.ha.standby import HotStandby
from croupier.ha.zklog import Fence, Fenced, ZooKeeperEventLog

__all__ = ["Leadership", "Seat"]

log = logging.getLogger(__name__)


class Seat(Protocol):
    """The master that leadership drives (``croupier.actors.master_front.MasterFront``)."""

    def take_seat(
        self, term: int, event_log: EventLog, on_log_error: Callable[[CroupierError], None]
    ) -> None:
        """Serve as the leader of ``term`` over ``event_log`` once ``TakeOver`` is logged.

        ``on_log_error(error)`` is to be called (on any thread) when an append fails.

        Raises:
            CroupierError: the take-over could not be logged; nothing keeps running.
        """

    def stop_writes(self, reason: str) -> None:
        """Refuse commands that log events; reads go on."""

    def reload(self, reason: str) -> None:
        """Rebuild the state from the log, then accept writes again."""

    def leave_seat(self) -> None:
        """Stop serving (idempotent)."""


class Leadership:
    """One master's part in the ensemble.

    Parameters:
        zk: a started ``KazooClient`` (the caller owns it).
        root: the ensemble's root path.
        url: this master's RPC URL (its election identifier and ``/leader`` record).
        seat: what to start on take-over and stop on step-down.
        standby: the follower's folded state.
        writer_wait: at most this long, a take-over waits for the previous leader's writer
            lock (it lingers until that leader's session expires).
        poll: how often a follower re-checks the election and refolds.
        wrap_log: what the seat serves over, given the fenced writer (e.g. a log that times
            each append for the metrics); None: the writer itself.

    State (written on the control thread):
        term: the newest term this master knows of (its own while it leads).
        leader_url: the leader's URL, "" when unknown.
    """

    def __init__(
        self,
        zk: Any,
        root: str,
        url: str,
        seat: Seat,
        standby: HotStandby,
        *,
        writer_wait: float = 15.0,
        poll: float = 0.2,
        wrap_log: Callable[[EventLog], EventLog] | None = None,
    ) -> None:
        self._zk = zk
        self._wrap_log = wrap_log
        self._root = root
        self.url = url
        self._seat = seat
        self._standby = standby
        self._writer_wait = writer_wait
        self._poll = poll
        self._zk_errors = (KazooException, zk.handler.timeout_exception)
        self._election = LeaderElection(zk, root, url)
        self._machine = r.RoleMachine(connected=True)
        self._inbox: queue.SimpleQueue[r.Stimulus] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._control: threading.Thread | None = None
        self._writer: ZooKeeperEventLog | None = None
        # whether the log watch is set: dropped by kazoo's thread while leading, set again
        # by the control thread when following (``_watch_lock`` orders the two)
        self._watch_lock = threading.Lock()
        self._watching = False
        self.term = 0
        self.leader_url = ""

    @property
    def role(self) -> MasterRole:
        """FOLLOWER or LEADER (a leader is one whose take-over finished)."""
        return self._machine.role

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        """Create the layout, start watching and contending.

        Raises:
            Unavailable: ZooKeeper could not be reached (nothing is left running).
        """
        try:
            self._zk.ensure_path(f"{self._root}/election")
            with contextlib.suppress(NodeExistsError):
                self._zk.create(f"{self._root}/epoch", b"0")
        except self._zk_errors as exc:
            raise Unavailable(f"cannot create the ensemble's layout under {self._root}: {exc}") from exc
        self._watch_log()
        self._zk.add_listener(self._on_zk_state)
        self._inbox.put(r.Contend())
        self._control = threading.Thread(target=self._run, name="ha-control", daemon=True)
        self._control.start()
        return self

    def stop(self) -> None:
        """Step down if leading and leave the election. Idempotent."""
        self._stopping.set()
        self._inbox.put(r.Stop())
        if self._control is not None:
            self._control.join()
            self._control = None
        self._zk.remove_listener(self._on_zk_state)
        # the control thread never started, or died: nobody else runs the machine now
        self._feed(r.Stop())

    # -- stimuli (any thread: only queue) ----------------------------------------------------
    def _on_zk_state(self, state: str) -> None:
        # kazoo's event thread: never block here
        if state == KazooState.SUSPENDED:
            self._inbox.put(r.Suspended())
        elif state == KazooState.LOST:
            self._inbox.put(r.SessionLost())
        else:
            self._inbox.put(r.Connected())

    def _on_log_error(self, term: int, error: CroupierError) -> None:
        if isinstance(error, Fenced):
            self._inbox.put(r.AppendFenced(term))

    # -- the control thread ------------------------------------------------------------------
    def _run(self) -> None:
        # the poll is due by the clock, not by a quiet inbox: a busy log must not starve it
        next_poll = time.monotonic() + self._poll
        while True:
            wait = next_poll - time.monotonic()
            try:
                stimulus: r.Stimulus = self._inbox.get(timeout=wait) if wait > 0 else r.Contend()
            except queue.Empty:
                stimulus = r.Contend()
            if isinstance(stimulus, r.Contend):
                next_poll = time.monotonic() + self._poll
            if self._stopping.is_set():
                self._feed(r.Stop())
                return
            self._feed(stimulus)

    def _feed(self, stimulus: r.Stimulus) -> None:
        pending: deque[r.Stimulus] = deque([stimulus])
        while pending:
            for action in self._machine.handle(pending.popleft()):
                answer = self._execute(action)
                if answer is not None:
                    pending.append(answer)

    def _execute(self, action: r.Action) -> r.Stimulus | None:
        match action:
            case r.JoinElection():
                return self._join()
            case r.CheckElection():
                return self._check()
            case r.ReadLeader():
                self._read_leader()
            case r.TakeOver():
                return self._take_over()
            case r.StopWrites(reason):
                self._seat.stop_writes(reason)
            case r.Reload(reason):
                self._seat.reload(reason)
            case r.StepDown(reason):
                self._step_down(reason)
            case r.Withdraw():
                self._election.withdraw()
            case r.Refold():
                self._ensure_watch()
                self._standby.refold()
        return None

    # -- the log watch -----------------------------------------------------------------------
    def _watch_log(self) -> None:
        """Fold on every change of the log while following (kazoo lists ``log/`` at each one).

        A leader wrote the changes itself: its watch drops at the first one after the take-over
        (issue 27: one listing of every batch znode per append, on the leader's kazoo threads),
        and the next ``Refold`` of the follower it became sets it again.

        Raises:
            Unavailable: the watch could not be set.
        """
        with self._watch_lock:
            self._watching = True

        def changed() -> bool | None:
            with self._watch_lock:  # kazoo's thread
                if self._machine.leading:
                    self._watching = False
                    return False
            self._inbox.put(r.LogChanged())
            return None

        try:
            self._standby.watch(changed)
        except Unavailable:
            with self._watch_lock:
                self._watching = False
            raise

    def _ensure_watch(self) -> None:
        """Set the watch again if a leadership dropped it (a follower's refold, control thread)."""
        with self._watch_lock:
            if self._watching:
                return
        try:
            self._watch_log()
        except Unavailable as exc:
            log.info("master %s could not watch the log (next poll retries): %s", self.url, exc)

    # -- the election ------------------------------------------------------------------------
    def _join(self) -> r.Stimulus | None:
        try:
            self._election.join()
        except Unavailable as exc:
            log.warning("master %s could not join the election (next poll retries): %s", self.url, exc)
            return r.NodeGone()
        return None

    def _check(self) -> r.Stimulus | None:
        try:
            leads = self._election.wait(timeout=self._poll)
        except ElectionNodeGone:
            return r.NodeGone()
        except Unavailable as exc:
            log.info("master %s could not check the election (next poll retries): %s", self.url, exc)
            return None
        return r.Won() if leads else r.OtherLeads()

    def _read_leader(self) -> None:
        try:
            data, _ = self._zk.get(f"{self._root}/leader")
            record = decode_leader(data)
        except NoNodeError:
            self.leader_url = ""
        except ValueError as exc:
            log.warning("ignoring %s/leader: %s", self._root, exc)
            self.leader_url = ""
        except self._zk_errors as exc:
            log.info("could not read %s/leader (next poll retries): %s", self._root, exc)
        else:
            self.leader_url, self.term = record.url, max(self.term, record.term)

    # -- take-over and step-down -------------------------------------------------------------
    def _take_over(self) -> r.Stimulus:
        started = time.monotonic()
        node = self._election.node
        try:
            if node is None:
                raise NotLeader("the election node is gone")
            term = self._bump_epoch()
            self._writer = self._open_writer(Fence(epoch_version=term, election_node=node))
            served: EventLog = self._writer if self._wrap_log is None else self._wrap_log(self._writer)
            self._seat.take_seat(term, served, lambda error: self._on_log_error(term, error))
            self._publish(term)
        except CroupierError as exc:
            log.warning("master %s could not take over: %s", self.url, exc.message)
            return r.TakeOverFailed(exc.message)
        self.term, self.leader_url = term, self.url
        log.warning(
            "master %s is the leader for term %d (took over in %.3f s)",
            self.url,
            term,
            time.monotonic() - started,
        )
        return r.TookOver(term)

    def _bump_epoch(self) -> int:
        """Set ``/epoch`` to its next version; that version is the new term (and the fence)."""
        path = f"{self._root}/epoch"
        try:
            _data, stat = self._zk.get(path)
            new = self._zk.set(path, str(stat.version + 1).encode(), version=stat.version)
        except BadVersionError as exc:
            raise NotLeader(f"{path} moved while taking over: another master took over") from exc
        except self._zk_errors as exc:
            raise Unavailable(f"cannot bump {path}: {exc!r}") from exc
        return int(new.version)

    def _open_writer(self, fence: Fence) -> ZooKeeperEventLog:
        deadline = time.monotonic() + self._writer_wait
        while True:
            try:
                return ZooKeeperEventLog(self._zk, self._root, fence=fence, writer=True)
            except LogLocked as exc:
                # the deposed leader's /writer node lingers until its session expires
                if time.monotonic() > deadline:
                    raise
                log.info("waiting for the previous writer to go: %s", exc.message)
                if self._stopping.wait(0.2):
                    raise Unavailable("stopping while waiting for the writer lock") from exc

    def _publish(self, term: int) -> None:
        path, data = f"{self._root}/leader", encode_leader(self.url, term)
        try:
            try:
                self._zk.create(path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                # the previous leader's record lingers until its session expires
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(path)
                self._zk.create(path, data, ephemeral=True, makepath=True)
        except self._zk_errors as exc:
            raise Unavailable(f"cannot publish {path}: {exc!r}") from exc

    def _step_down(self, reason: str) -> None:
        self._seat.leave_seat()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self._withdraw_record()
        if self.leader_url == self.url:
            self.leader_url = ""
        log.warning("master %s stepped down: %s", self.url, reason)

    def _withdraw_record(self) -> None:
        path = f"{self._root}/leader"
        try:
            data, stat = self._zk.get(path)
            if decode_leader(data).url == self.url:
                self._zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass  # gone, or replaced by the next leader's
        except ValueError as exc:
            log.warning("leaving %s alone: %s", path, exc)
        except self._zk_errors as exc:
            # unreachable: the ephemeral record goes with this session
            log.info("could not remove %s: %s", path, exc)

    # -- what the front end asks -------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """The ``master`` fields of a ``STATUS`` reply: role, url, term, leader, followers."""
        out: dict[str, Any] = {
            "role": str(self.role),
            "url": self.url,
            "term": self.term,
            "leader": self.leader_url,
        }
        try:
            urls = [url for _, url in self._election.contenders()]
            out["followers"] = [u for u in urls if u != self.leader_url]
        except Unavailable as exc:
            out["followers_error"] = exc.message
        return out

    def refusal(self) -> CroupierError:
        """What a follower answers to a command it cannot serve: ``NOT_LEADER`` naming the
        leader, or ``UNAVAILABLE`` while no leader is known."""
        leader = self.leader_url
        if leader and leader != self.url:
            return NotLeader(f"{self.url} is a follower; the leader is {leader}", {"leader": leader})
        return Unavailable(f"{self.url} is a follower and no leader is known yet (an election is under way)")
