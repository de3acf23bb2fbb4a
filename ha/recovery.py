"""Rebuild the master's state from an event log: the newest snapshot, then the tail.

Usage::

    state = load_state(log)      # state.seq == log.last_seq()

Stateless; runs on the caller's thread (the master actor's, or a follower's control thread).
"""

from __future__ import annotations

from croupier.core.errors import CroupierError
from croupier.core.events import decode_event
from croupier.core.state import MasterState, apply
from croupier.ha.eventlog import EventLog, LogCorrupted, replay

__all__ = ["UNREPLAYABLE", "load_state", "unreplayable"]

# what a stored snapshot or record that passed its checksum but cannot be folded raises:
# BadRequest (decode), InvalidEvent (the fold), and the plain errors a damaged snapshot's
# JSON can give ``MasterState.from_snapshot``
UNREPLAYABLE = (CroupierError, ValueError, KeyError, TypeError)


def load_state(log: EventLog) -> MasterState:
    """Fold the log into a fresh state.

    Raises:
        LogCorrupted: the log holds a snapshot or an event that cannot be decoded or folded
            (an unknown event kind, an event the fold rejects): a bug or corruption. The
            message names the seq; nothing is skipped.
        Unavailable: the log cannot be read.
    """
    data, start, tail = replay(log)
    try:
        state = MasterState.from_snapshot(data) if data is not None else MasterState()
    except UNREPLAYABLE as exc:
        raise unreplayable(f"the snapshot at seq {start}", start, exc) from exc
    state.seq = start
    for seq, record in tail:
        try:
            apply(state, decode_event(record))
        except UNREPLAYABLE as exc:
            raise unreplayable(f"record {seq}", seq, exc) from exc
        state.seq = seq
    return state


def unreplayable(what: str, seq: int, exc: Exception) -> LogCorrupted:
    reason = exc.message if isinstance(exc, CroupierError) else repr(exc)
    return LogCorrupted(
        f"event log corrupted: {what} passed its checksum but cannot be replayed: {reason};"
        " refusing to start (nothing is skipped)",
        {"seq": seq},
    )
