"""Property tests of the fold: replay equals live state; snapshot + tail equals replay;
``decide`` never produces an event that ``apply`` rejects."""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.commands import Command, decode_command, encode_command
from croupier.core.decide import decide
from croupier.core.errors import CroupierError
from croupier.core.events import Event, decode_event, encode_event
from croupier.core.state import MasterState, apply
from tests.core.strategies import scenarios


def run(cmds: list[Command], seed: int) -> tuple[MasterState, list[Event]]:
    """Drive commands through decide + apply as the master does; return live state and log."""
    state = MasterState()
    log: list[Event] = []
    rng = random.Random(seed)
    for i, original in enumerate(cmds):
        # every command also survives the wire codec
        cmd = decode_command(*encode_command(original))
        try:
            _, events = decide(state, cmd, float(i), rng)
        except CroupierError:
            continue
        for event in events:
            apply(state, event)  # must never raise InvalidEvent
            log.append(decode_event(encode_event(event)))
        state.seq = len(log)
    return state, log


def fold(events: list[Event], start: MasterState | None = None, seq0: int = 0) -> MasterState:
    state = start if start is not None else MasterState()
    for i, event in enumerate(events, start=seq0 + 1):
        apply(state, event)
        state.seq = i
    return state


@settings(max_examples=300, deadline=None)
@given(scenarios, st.integers(0, 2**32))
def test_replaying_the_log_equals_live_state(cmds: list[Command], seed: int) -> None:
    live, log = run(cmds, seed)
    assert fold(log).to_json() == live.to_json()


@settings(max_examples=200, deadline=None)
@given(scenarios, st.integers(0, 2**32), st.data())
def test_snapshot_plus_tail_equals_full_replay(cmds: list[Command], seed: int, data: st.DataObject) -> None:
    _, log = run(cmds, seed)
    cut = data.draw(st.integers(0, len(log)))
    snapshot = fold(log[:cut]).snapshot_bytes()
    restored = fold(log[cut:], MasterState.from_snapshot(snapshot), cut)
    assert restored.to_json() == fold(log).to_json()


@settings(max_examples=300, deadline=None)
@given(scenarios, st.integers(0, 2**32))
def test_decide_never_produces_an_event_apply_rejects(cmds: list[Command], seed: int) -> None:
    # run() applies every decided event; an InvalidEvent would escape as a failure here
    state, log = run(cmds, seed)
    assert state.seq == len(log)


@settings(max_examples=200, deadline=None)
@given(scenarios, st.integers(0, 2**32))
def test_decide_does_not_mutate_state(cmds: list[Command], seed: int) -> None:
    state, _ = run(cmds[:-5] if len(cmds) > 5 else [], seed)
    before = state.to_json()
    rng = random.Random(seed)
    for cmd in cmds[-5:]:
        with contextlib.suppress(CroupierError):
            decide(state, cmd, 0.0, rng)
    assert state.to_json() == before
