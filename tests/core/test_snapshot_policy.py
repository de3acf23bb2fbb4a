"""``SnapshotPolicy``: snapshots cost about a row per event, and the log past one stays bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.snapshot_policy import MAX_GROUPS, STRETCH, SnapshotPolicy

# each group commit: (events in it, rows the state grows by per event: a new winner or not)
groups_strategy = st.lists(st.tuples(st.integers(1, 4096), st.booleans()), min_size=1, max_size=300)


def _run(every: int, groups: list[tuple[int, bool]]) -> tuple[int, int, int, int]:
    """Events, rows written by snapshots, most events and most groups seen past one."""
    policy = SnapshotPolicy(every)
    seq = rows = written = worst_events = worst_groups = 0
    for count, (events, grows) in enumerate(groups, start=1):
        for _ in range(events):  # the master checks after each command (here: each event)
            seq += 1
            rows += 1 if grows else 0
            if policy.due(seq, count):
                policy.taken(seq, rows, count)
                written += rows
            worst_events = max(worst_events, seq - policy.seq)
            worst_groups = max(worst_groups, count - policy.groups)
    return seq, written, worst_events, worst_groups


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000), groups_strategy)
def test_the_log_past_a_snapshot_stays_bounded(every: int, groups: list[tuple[int, bool]]) -> None:
    _, _, worst_events, worst_groups = _run(every, groups)
    assert worst_events < STRETCH * every
    assert worst_groups <= MAX_GROUPS


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000), st.lists(st.integers(64, 4096), min_size=1, max_size=200))
def test_a_growing_state_costs_a_few_rows_per_event(every: int, sizes: list[int]) -> None:
    """One winner per event (MAPPER_ENDs), in groups of 64 or more (a busy master)."""
    events, written, _, _ = _run(every, [(n, True) for n in sizes])
    # while the interval grows with the state, each snapshot follows as many events as it
    # writes rows, give or take a group; past STRETCH * every, the state is rewritten every
    # STRETCH * every events: quadratic still, but 1 / STRETCH of the old rule's cost
    cap = STRETCH * every
    assert written <= 3 * events + events * events // (2 * cap) + cap


def test_the_old_rule_was_quadratic_and_this_one_is_not() -> None:
    events, written, _, _ = _run(10_000, [(1000, True)] * 100)  # 100,000 MAPPER_ENDs
    assert events == 100_000 and written <= 160_000  # every 10,000 events: 550,000 rows
