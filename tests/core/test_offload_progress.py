"""Offload progress and lag from the master's state (croupier.core.offload_progress)."""

from __future__ import annotations

from croupier.core.offload_progress import offload_row
from croupier.core.state import CommitInfo, Location, MasterState, ShuffleInfo


def _shuffle(sid: int, partitions: int, *, at: float, total: int, lost: int = 0) -> ShuffleInfo:
    info = ShuffleInfo("app", sid, 2, partitions, True, (("w1", "w2"), ("w3", None)), registered_at=0.0)
    lost_copies = tuple((p, 0, "w1") for p in range(lost))
    info.commit = CommitInfo(lost_copies, (), total, 10, at)
    return info


def test_copies_bytes_and_lag() -> None:
    state = MasterState()
    # 5 partitions on two pairs: 0, 2, 4 on (w1, w2), 1, 3 on (w3, -): 3*2 + 2 = 8 copies
    done = _shuffle(0, 5, at=10.0, total=500)
    done.offloaded = tuple((p, 0, r, 100, "d") for p in range(5) for r in ("primary", "replica"))[:8]
    late = _shuffle(1, 5, at=40.0, total=500)
    late.revivals = {2: [Location(1, "w3", "w1")]}  # one more location of 2 copies: 10 copies
    late.offloaded = ((0, 0, "primary", 100, "d"),)
    old = _shuffle(2, 5, at=20.0, total=500, lost=1)  # one copy lost at commit: 7 copies
    uncommitted = ShuffleInfo("app", 3, 2, 5, True, (("w1", "w2"),), registered_at=0.0)
    for info in (done, late, old, uncommitted):
        state.shuffles[("app", info.shuffle_id)] = info
    row = offload_row(state, now=100.0)
    assert (row.committed_copies, row.offloaded_copies, row.pending_copies) == (8 + 10 + 7, 9, 9 + 7)
    assert row.oldest_pending_seconds == 80.0  # shuffle 2 committed at 20
    assert [(r.shuffle_id, r.committed_copies, r.offloaded_copies) for r in row.shuffles] == [
        (2, 7, 0),
        (1, 10, 1),
    ]
    # bytes: 500 per location's primary, spread over the copies: 10 copies of 6 locations
    late_row = row.shuffles[1]
    assert late_row.pending_bytes == 500 * 10 // 6 - 100 and late_row.lag_seconds == 60.0
    assert row.pending_bytes == late_row.pending_bytes + 500 * 7 // 5


def test_partitions_no_map_declared_have_no_copy_to_wait_for() -> None:
    state = MasterState()
    info = _shuffle(0, 5, at=10.0, total=500)  # 8 copies, 3 of them of partitions 2, 3, 4
    for m in range(2):
        info.add_winner(m, 0, 2, bytes([0b00011]))  # both maps wrote partitions 0 and 1 only
    state.shuffles[("app", 0)] = info
    row = offload_row(state, now=20.0)
    assert (row.committed_copies, row.pending_copies) == (8 - 5, 3)  # 2, 4: two copies; 3: one
    info.offloaded = tuple((p, 0, r, 250, "d") for p in (0, 1) for r in ("primary", "replica"))[:3]
    row = offload_row(state, now=20.0)
    assert (row.committed_copies, row.offloaded_copies, row.pending_copies) == (3, 3, 0)
    assert row.shuffles == () and row.oldest_pending_seconds == 0.0


def test_nothing_committed_nothing_pending() -> None:
    row = offload_row(MasterState(), now=5.0)
    assert row.committed_copies == row.pending_copies == row.pending_bytes == 0
    assert row.oldest_pending_seconds == 0.0 and row.shuffles == ()


def test_an_empty_epoch_listed_at_commit_is_not_pending() -> None:
    """A revived epoch of a declared partition that nothing was pushed to holds no copy: the
    commit lists its copies as empty (ShuffleCommitted v3), and they are never pending (they
    stayed pending for ever)."""
    state = MasterState()
    info = _shuffle(0, 2, at=10.0, total=500)  # partition 0 on (w1, w2), 1 on (w3, -): 3 copies
    for m in range(2):
        info.add_winner(m, 0, 2, bytes([0b11]))
    info.revivals = {0: [Location(1, "w3", "w1")]}  # a split after the last push: 5 copies
    info.commit = CommitInfo((), (), 500, 10, 10.0, (), ((0, 1, "w1"), (0, 1, "w3")))
    info.offloaded = ((0, 0, "primary", 200, "d"), (0, 0, "replica", 200, "d"), (1, 0, "primary", 300, "d"))
    state.shuffles[("app", 0)] = info
    row = offload_row(state, now=20.0)
    assert (row.committed_copies, row.offloaded_copies, row.pending_copies) == (3, 3, 0)
    assert row.shuffles == ()
