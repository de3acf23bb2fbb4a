"""Offload progress and lag (issue 26), from the master's folded state: pure.

For each committed shuffle the master knows how many copies its commit kept (every copy of
every epoch but the ``lost_copies``, the ``empty_copies`` (copies of declared partitions that
hold nothing: an epoch placed after the last push to it; listed since ``ShuffleCommitted``
v3) and those of partitions no winning map declared: nothing was written there, so no copy
is committed or offloaded, as ``wait_offloaded`` counts), how many are in the object store
(``CopiesOffloaded``: ``ShuffleInfo.offloaded``, each with its size), when it committed
(``CommitInfo.at``) and its primaries' bytes (``total_bytes``). From these:

- ``committed_copies`` / ``offloaded_copies``: over every committed shuffle;
- ``pending_copies``: committed copies with no object yet;
- ``pending_bytes``: an estimate, the shuffle's committed bytes (``total_bytes`` times its
  copies per location) less the offloaded copies' sizes, over the shuffles still pending;
- ``oldest_pending_seconds``: how long ago the oldest shuffle still pending committed (the
  offload's lag; 0 when nothing is pending);
- ``shuffles``: the pending shuffles, oldest commit first, at most ``MAX_ROWS`` of them.

The cost is one pass over the shuffles (plus their revived partitions); only a shuffle that
looks pending is looked at per partition (its declared maps, cached in the state) and per
offloaded copy.
"""

from __future__ import annotations

from croupier.core.replies import OffloadRow, OffloadShuffleRow
from croupier.core.state import MasterState, ShuffleInfo

__all__ = ["MAX_ROWS", "offload_row"]

MAX_ROWS = 100


def _committed_copies(info: ShuffleInfo) -> tuple[int, int]:
    """(copies the commit kept, locations) of a committed shuffle."""
    n = len(info.pairs)
    per_round, rest = divmod(info.num_partitions, n) if n else (0, 0)
    copies = 0
    for i, (_, replica) in enumerate(info.pairs):
        copies += (per_round + (1 if i < rest else 0)) * (1 if replica is None else 2)
    locations = info.num_partitions
    for revived in info.revivals.values():
        locations += len(revived)
        copies += sum(1 if loc.replica is None else 2 for loc in revived)
    assert info.commit is not None
    return max(0, copies - len(info.commit.lost_copies) - len(info.commit.empty_copies)), locations


def _empty_copies(info: ShuffleInfo) -> int:
    """Copies of the partitions no winning map declared (none committed, none offloaded)."""
    if not info.all_ended:
        return 0
    empty = 0
    for p in range(info.num_partitions):
        if info.declared_maps(p) == ():
            empty += sum(1 if loc.replica is None else 2 for loc in info.locations(p))
    return empty


def offload_row(state: MasterState, now: float) -> OffloadRow:
    """Progress and lag of the offload over every committed shuffle of ``state``."""
    committed = offloaded = pending = pending_bytes = 0
    rows: list[OffloadShuffleRow] = []
    for info in state.shuffles.values():
        if info.commit is None:
            continue
        copies, locations = _committed_copies(info)
        if len(info.offloaded) < copies:
            copies = max(0, copies - _empty_copies(info))
        done = min(len(info.offloaded), copies)
        committed += copies
        offloaded += done
        if done >= copies:
            continue
        pending += copies - done
        estimate = info.commit.total_bytes * copies // max(1, locations)
        left = max(0, estimate - sum(size for _, _, _, size, _ in info.offloaded))
        pending_bytes += left
        lag = round(max(0.0, now - info.commit.at), 3)
        rows.append(OffloadShuffleRow(info.app_id, info.shuffle_id, copies, done, left, lag))
    rows.sort(key=lambda r: (-r.lag_seconds, r.app_id, r.shuffle_id))
    return OffloadRow(
        committed_copies=committed,
        offloaded_copies=offloaded,
        pending_copies=pending,
        pending_bytes=pending_bytes,
        oldest_pending_seconds=rows[0].lag_seconds if rows else 0.0,
        shuffles=tuple(rows[:MAX_ROWS]),
    )
