"""``RoleMachine``: an HA master's role as a pure state machine (DESIGN §5).

Stimuli go in (ZooKeeper session events, the election's answers, a fenced
append, the outcome of a take-over) and actions come out; the leadership
recipe (``croupier.ha.leadership``) carries the actions out against ZooKeeper
and feeds their outcomes back. No kazoo, no threads, no clock here, so every
sequence of events can be replayed in a test.

Phases::

    FOLLOWING --Won--> TAKING_OVER --TookOver(term)--> LEADING
     ^  ^                  |                              |
     |  +--TakeOverFailed--+                              |
     +------ SessionLost / AppendFenced(term) / NodeGone -+
    any phase --Stop--> STOPPED

Rules that keep a deposed leader from writing (kazoo's own advice: "a client
should not assume that locks are valid" while SUSPENDED):

- ``Suspended``: a leader stops accepting writes but keeps its leadership (its
  session may survive); ``Connected`` then reloads the state from the log and
  writes again.
- ``SessionLost`` (the session expired, so the election node is gone) and
  ``AppendFenced`` for the current term (another master bumped ``/epoch``): step down
  at once, whatever else happened; leading again takes a new ``Won``.
- A stale ``TookOver`` or ``AppendFenced`` (from an older term or after stepping down)
  changes nothing.

State: everything here; one thread (the recipe's control thread) calls ``handle``.

Usage::

    machine = RoleMachine()
    for action in machine.handle(Connected()):
        ...                    # JoinElection(), CheckElection(): the shell runs them
    machine.handle(Won())      # -> [TakeOver()]; the shell then feeds TookOver(term)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from croupier.core.enums import MasterRole

__all__ = [
    "Action",
    "AppendFenced",
    "CheckElection",
    "Connected",
    "Contend",
    "JoinElection",
    "LogChanged",
    "NodeGone",
    "OtherLeads",
    "Phase",
    "ReadLeader",
    "Refold",
    "Reload",
    "RoleMachine",
    "SessionLost",
    "StepDown",
    "Stimulus",
    "Stop",
    "StopWrites",
    "Suspended",
    "TakeOver",
    "TakeOverFailed",
    "TookOver",
    "Withdraw",
    "Won",
]


# -- stimuli ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Contend:
    """Start, or the periodic poll: follow the log and make sure this master is in the election."""


@dataclass(frozen=True, slots=True)
class Won:
    """The election says this contender's node is the lowest: it may take over."""


@dataclass(frozen=True, slots=True)
class OtherLeads:
    """Another contender is ahead of this one."""


@dataclass(frozen=True, slots=True)
class NodeGone:
    """This contender's election node is gone (or could not be created or checked)."""


@dataclass(frozen=True, slots=True)
class TookOver:
    """The take-over finished: ``term`` is logged and ``/leader`` published."""

    term: int


@dataclass(frozen=True, slots=True)
class TakeOverFailed:
    """The take-over failed part-way (``reason`` says where)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Suspended:
    """kazoo ``SUSPENDED``: ZooKeeper is unreachable; the session may still be alive."""


@dataclass(frozen=True, slots=True)
class Connected:
    """kazoo ``CONNECTED``: the session is back (or a new one started after ``SessionLost``)."""


@dataclass(frozen=True, slots=True)
class SessionLost:
    """kazoo ``LOST``: the session expired; its ephemeral nodes (election, leader) are gone."""


@dataclass(frozen=True, slots=True)
class AppendFenced:
    """An append by the writer of ``term`` failed its fence: another master took over."""

    term: int


@dataclass(frozen=True, slots=True)
class LogChanged:
    """The log gained batches (the follower's watch fired)."""


@dataclass(frozen=True, slots=True)
class Stop:
    """The master is shutting down."""


Stimulus = (
    Contend
    | Won
    | OtherLeads
    | NodeGone
    | TookOver
    | TakeOverFailed
    | Suspended
    | Connected
    | SessionLost
    | AppendFenced
    | LogChanged
    | Stop
)


# -- actions ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JoinElection:
    """Create this master's election node (at the back of the queue)."""


@dataclass(frozen=True, slots=True)
class CheckElection:
    """Ask whether this contender leads; answer ``Won``, ``OtherLeads`` or ``NodeGone``."""


@dataclass(frozen=True, slots=True)
class ReadLeader:
    """Read ``/leader`` so that ``NOT_LEADER`` replies can name the leader."""


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Bump ``/epoch`` (its version is the new term and the fence), open the fenced writer,
    start the master actor, log ``TakeOver``, publish ``/leader``; answer ``TookOver`` or
    ``TakeOverFailed``."""


@dataclass(frozen=True, slots=True)
class StopWrites:
    """Refuse commands that log events until ``Reload``; reads go on."""

    reason: str


@dataclass(frozen=True, slots=True)
class Reload:
    """Rebuild the leader's state from the log, then accept writes again."""

    reason: str


@dataclass(frozen=True, slots=True)
class StepDown:
    """Stop the actor, close the writer, withdraw ``/leader`` if it is this master's."""

    reason: str


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Delete this master's election node (it goes to the back when it joins again)."""


@dataclass(frozen=True, slots=True)
class Refold:
    """Fold the log's new records into the follower's state."""


Action = (
    JoinElection | CheckElection | ReadLeader | TakeOver | StopWrites | Reload | StepDown | Withdraw | Refold
)


class Phase(Enum):
    FOLLOWING = "following"
    TAKING_OVER = "taking over"
    LEADING = "leading"
    STOPPED = "stopped"


class RoleMachine:
    """The role of one HA master, driven by ``handle``.

    State:
        phase: see the module docstring.
        term: the term this master leads (0 unless LEADING).
        connected: whether the ZooKeeper session is usable now.
        in_election: whether this master's election node should exist.
        writable: whether the leader accepts commands that log events.

    Parameters:
        connected: the session's state when the machine starts (the client is usually started first).
    """

    def __init__(self, *, connected: bool = True) -> None:
        self.phase = Phase.FOLLOWING
        self.term = 0
        self.connected = connected
        self.in_election = False
        self.writable = False

    @property
    def role(self) -> MasterRole:
        """What ``STATUS`` reports: only a finished take-over makes a leader."""
        return MasterRole.LEADER if self.phase is Phase.LEADING else MasterRole.FOLLOWER

    @property
    def leading(self) -> bool:
        """Whether this master holds (or is taking) the lead, i.e. has something to step down from."""
        return self.phase in (Phase.TAKING_OVER, Phase.LEADING)

    def handle(self, stimulus: Stimulus) -> list[Action]:
        """Apply one stimulus; return the actions to carry out, in order."""
        if self.phase is Phase.STOPPED:
            return []
        match stimulus:
            case Contend() | LogChanged() | OtherLeads():
                return self._follow(stimulus)
            case Won():
                return self._won()
            case TookOver(term):
                return self._took_over(term)
            case Suspended():
                return self._suspended()
            case Connected():
                return self._connected()
            case SessionLost():
                # the session took the election node with it: nothing to withdraw
                self.connected = False
                self.in_election = False
                return self._step_down("the ZooKeeper session expired")
            case AppendFenced(term) if self.leading and term == self.term:
                return [*self._step_down("another master took over (fenced append)"), *self._withdraw()]
            case AppendFenced():
                return []
            case NodeGone():
                self.in_election = False
                return self._step_down("lost the election node")
            case TakeOverFailed(reason) if self.phase is Phase.TAKING_OVER:
                return [*self._step_down(f"the take-over failed: {reason}"), *self._withdraw()]
            case TakeOverFailed():
                return []
            case Stop():
                actions = [*self._step_down("stopping"), *self._withdraw()]
                self.phase = Phase.STOPPED
                return actions

    def _follow(self, stimulus: Contend | LogChanged | OtherLeads) -> list[Action]:
        if self.phase is not Phase.FOLLOWING:
            return []
        if isinstance(stimulus, LogChanged):
            return [Refold()]
        if isinstance(stimulus, OtherLeads):
            return [ReadLeader()]
        return self._contend()

    def _contend(self) -> list[Action]:
        if not self.connected or self.phase is not Phase.FOLLOWING:
            return []
        actions: list[Action] = [Refold()]
        if not self.in_election:
            self.in_election = True
            actions.append(JoinElection())
        actions.append(CheckElection())
        return actions

    def _won(self) -> list[Action]:
        if self.phase is not Phase.FOLLOWING or not self.in_election or not self.connected:
            return []
        self.phase = Phase.TAKING_OVER
        return [TakeOver()]

    def _took_over(self, term: int) -> list[Action]:
        if self.phase is not Phase.TAKING_OVER:
            return []  # a stale answer: the take-over was abandoned meanwhile
        self.phase, self.term, self.writable = Phase.LEADING, term, True
        if not self.connected:  # suspended while taking over
            self.writable = False
            return [StopWrites("ZooKeeper is unreachable")]
        return []

    def _suspended(self) -> list[Action]:
        self.connected = False
        if self.phase is Phase.LEADING and self.writable:
            self.writable = False
            return [StopWrites("ZooKeeper is unreachable")]
        return []

    def _connected(self) -> list[Action]:
        self.connected = True
        if self.phase is Phase.LEADING:
            if self.writable:
                return []
            self.writable = True
            return [Reload("ZooKeeper is reachable again")]
        return self._contend()

    def _step_down(self, reason: str) -> list[Action]:
        if not self.leading:
            return []
        self.phase, self.term, self.writable = Phase.FOLLOWING, 0, False
        return [StepDown(reason)]

    def _withdraw(self) -> list[Action]:
        if not self.in_election:
            return []
        self.in_election = False
        return [Withdraw()]
