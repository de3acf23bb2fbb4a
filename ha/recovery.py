"""Rebuild the master's state from an event log: the newest snapshot, then the tail.

Usage::

    state = load_state(log)      # state.seq == log.last_seq()
"""

from __future__ import annotations

from croupier.core.events import decode_event
from croupier.core.state import MasterState, apply
from croupier.ha.eventlog import EventLog, replay

__all__ = ["load_state"]


def load_state(log: EventLog) -> MasterState:
    """Fold the log into a fresh state.

    Raises:
        InvalidEvent / BadRequest: the log holds an event the fold rejects (a bug or corruption).
    """
    data, start, tail = replay(log)
    state = MasterState.from_snapshot(data) if data is not None else MasterState()
    state.seq = start
    for seq, record in tail:
        apply(state, decode_event(record))
        state.seq = seq
    return state
