"""The HA role machine without ZooKeeper: stimuli in, actions out (``croupier.ha.roles``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.enums import MasterRole
from croupier.ha.roles import (
    AppendFenced,
    CheckElection,
    Connected,
    Contend,
    JoinElection,
    LogChanged,
    NodeGone,
    OtherLeads,
    Phase,
    ReadLeader,
    Refold,
    Reload,
    RoleMachine,
    SessionLost,
    StepDown,
    Stimulus,
    Stop,
    StopWrites,
    Suspended,
    TakeOver,
    TakeOverFailed,
    TookOver,
    Withdraw,
    Won,
)


def kinds(actions: Sequence[object]) -> list[type]:
    return [type(a) for a in actions]


def leader(term: int = 3) -> RoleMachine:
    machine = RoleMachine()
    assert kinds(machine.handle(Contend())) == [Refold, JoinElection, CheckElection]
    assert machine.handle(Won()) == [TakeOver()]
    assert machine.handle(TookOver(term)) == []
    assert machine.role is MasterRole.LEADER and machine.writable and machine.term == term
    return machine


def test_a_follower_contends_once_and_then_only_checks() -> None:
    machine = RoleMachine()
    assert kinds(machine.handle(Contend())) == [Refold, JoinElection, CheckElection]
    assert kinds(machine.handle(Contend())) == [Refold, CheckElection]
    assert machine.role is MasterRole.FOLLOWER


def test_winning_takes_over_and_leads_only_once_the_take_over_finished() -> None:
    machine = RoleMachine()
    machine.handle(Contend())
    assert machine.handle(Won()) == [TakeOver()]
    assert machine.phase is Phase.TAKING_OVER and machine.role is MasterRole.FOLLOWER
    machine.handle(TookOver(7))
    assert (machine.role, machine.term) == (MasterRole.LEADER, 7)


def test_losing_reads_who_leads_and_stays_a_follower() -> None:
    machine = RoleMachine()
    machine.handle(Contend())
    assert machine.handle(OtherLeads()) == [ReadLeader()]
    assert machine.role is MasterRole.FOLLOWER and not machine.writable


def test_a_failed_take_over_steps_down_and_leaves_the_election() -> None:
    machine = RoleMachine()
    machine.handle(Contend())
    machine.handle(Won())
    actions = machine.handle(TakeOverFailed("no writer lock"))
    assert kinds(actions) == [StepDown, Withdraw]
    assert machine.role is MasterRole.FOLLOWER
    assert kinds(machine.handle(Contend())) == [Refold, JoinElection, CheckElection]


def test_suspended_stops_writes_but_keeps_the_lead_and_reconnecting_reloads() -> None:
    machine = leader()
    assert kinds(machine.handle(Suspended())) == [StopWrites]
    assert machine.role is MasterRole.LEADER and not machine.writable
    assert machine.handle(Suspended()) == []
    assert machine.handle(Contend()) == []  # no election traffic while unreachable
    assert kinds(machine.handle(Connected())) == [Reload]
    assert machine.role is MasterRole.LEADER and machine.writable


def test_session_lost_steps_down_and_rejoins_once_connected_again() -> None:
    machine = leader()
    machine.handle(Suspended())
    assert kinds(machine.handle(SessionLost())) == [StepDown]  # the node went with the session
    assert machine.role is MasterRole.FOLLOWER and not machine.writable
    assert machine.handle(Contend()) == []  # not connected yet
    assert kinds(machine.handle(Connected())) == [Refold, JoinElection, CheckElection]


def test_a_fenced_write_after_a_lost_session_steps_down_and_never_writes_again() -> None:
    # a paused leader wakes up: its append fails the fence before kazoo reports LOST
    machine = leader(term=4)
    assert kinds(machine.handle(AppendFenced(4))) == [StepDown, Withdraw]
    assert machine.role is MasterRole.FOLLOWER and not machine.writable
    # then the session's expiry and the reconnection arrive: nothing revives the old lead
    assert machine.handle(SessionLost()) == []
    assert machine.handle(TookOver(4)) == []
    assert kinds(machine.handle(Connected())) == [Refold, JoinElection, CheckElection]
    assert machine.role is MasterRole.FOLLOWER and not machine.writable


def test_a_stale_fence_from_an_older_term_does_not_depose_the_new_leader() -> None:
    machine = leader(term=4)
    machine.handle(AppendFenced(4))
    machine.handle(Contend())
    machine.handle(Won())
    machine.handle(TookOver(6))
    assert machine.handle(AppendFenced(4)) == []
    assert machine.role is MasterRole.LEADER and machine.writable


def test_suspended_during_the_take_over_leads_without_writing() -> None:
    machine = RoleMachine()
    machine.handle(Contend())
    machine.handle(Won())
    assert machine.handle(Suspended()) == []
    assert kinds(machine.handle(TookOver(2))) == [StopWrites]
    assert not machine.writable
    assert kinds(machine.handle(Connected())) == [Reload]


def test_a_follower_refolds_when_the_log_changes_and_a_leader_does_not() -> None:
    machine = RoleMachine()
    assert machine.handle(LogChanged()) == [Refold()]
    assert leader().handle(LogChanged()) == []


def test_a_gone_node_is_joined_again_on_the_next_poll() -> None:
    machine = RoleMachine()
    machine.handle(Contend())
    assert machine.handle(NodeGone()) == []
    assert kinds(machine.handle(Contend())) == [Refold, JoinElection, CheckElection]


def test_stop_steps_down_withdraws_and_then_ignores_everything() -> None:
    machine = leader()
    assert kinds(machine.handle(Stop())) == [StepDown, Withdraw]
    assert machine.handle(Connected()) == [] and machine.handle(Won()) == []
    assert machine.role is MasterRole.FOLLOWER


@pytest.mark.parametrize("role", list(MasterRole))
def test_roles_are_their_wire_strings(role: MasterRole) -> None:
    assert role == role.value and f"{role}" == role.value


# -- properties ------------------------------------------------------------------------------
STIMULI: st.SearchStrategy[Stimulus] = st.one_of(
    st.sampled_from(
        [
            Contend(),
            Won(),
            OtherLeads(),
            NodeGone(),
            Suspended(),
            Connected(),
            SessionLost(),
            LogChanged(),
            Stop(),
        ]
    ),
    st.builds(TookOver, st.integers(1, 4)),
    st.builds(AppendFenced, st.integers(1, 4)),
    st.builds(TakeOverFailed, st.just("test")),
)


@given(st.lists(STIMULI, max_size=40))
def test_no_sequence_keeps_a_deposed_leader_writing(stimuli: list[Stimulus]) -> None:
    machine = RoleMachine()
    deposed = False  # a LOST or a fence of the current term since the last win
    suspended = False
    for stimulus in stimuli:
        fenced_now = isinstance(stimulus, AppendFenced) and machine.leading and stimulus.term == machine.term
        was_leading = machine.leading
        actions = machine.handle(stimulus)
        if isinstance(stimulus, SessionLost) or fenced_now:
            deposed = True
            if was_leading:
                assert StepDown in kinds(actions)
        if isinstance(stimulus, Won) and TakeOver() in actions:
            deposed = False
        suspended = isinstance(stimulus, Suspended) or (suspended and not isinstance(stimulus, Connected))
        if TakeOver() in actions:
            assert machine.connected and machine.in_election
        assert not (deposed and machine.role is MasterRole.LEADER and machine.writable)
        assert not (suspended and machine.writable)
        assert machine.writable <= (machine.role is MasterRole.LEADER)


@given(st.lists(STIMULI, max_size=40))
def test_withdraw_and_join_alternate(stimuli: list[Stimulus]) -> None:
    # never two election nodes at once (a join while one exists), never a withdraw of none
    machine = RoleMachine()
    joined = False
    for stimulus in stimuli:
        for action in machine.handle(stimulus):
            if isinstance(action, JoinElection):
                assert not joined
                joined = True
            elif isinstance(action, Withdraw):
                assert joined
                joined = False
        if isinstance(stimulus, SessionLost | NodeGone):
            joined = False  # the node is gone without a withdraw
        assert joined == machine.in_election
