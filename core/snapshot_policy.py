"""When the master writes a snapshot of its state (issue 27).

A snapshot costs O(state): written every ``every`` events, the MAPPER_ENDs of one shuffle of
N maps wrote N²/(2·every) rows. So the interval in events grows with the state: at least
``every``, at least the rows the last snapshot held, at most ``STRETCH`` times ``every`` (which
bounds a restart's replay). Commands that trickle in one per group commit still get a
snapshot after ``MAX_GROUPS`` groups: a ZooKeeper log holds a znode per group, and a takeover
lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_GROUPS", "STRETCH", "SnapshotPolicy"]

STRETCH = 16
"""The multiple of ``every`` that the interval in events may grow to."""
MAX_GROUPS = 10_000
"""At most this many group commits past a snapshot."""


@dataclass
class SnapshotPolicy:
    """The last snapshot's seq, rows (``MasterState.rows``) and group count, and the rule."""

    every: int
    seq: int = 0
    rows: int = 0
    groups: int = 0

    def due(self, seq: int, groups: int) -> bool:
        """Whether to snapshot at ``seq``, with ``groups`` group commits made so far."""
        since = seq - self.seq
        if since <= 0:
            return False
        if since >= min(max(self.every, self.rows), STRETCH * self.every):
            return True
        return groups - self.groups >= MAX_GROUPS

    def taken(self, seq: int, rows: int, groups: int) -> None:
        """A snapshot of ``rows`` rows at ``seq`` (or a state loaded there)."""
        self.seq, self.rows, self.groups = seq, rows, groups
