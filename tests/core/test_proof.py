"""The completeness proof: any loss from a complete read is detected, losers never matter."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from croupier.core.proof import Verdict, expand_ranges, prove

Triple = tuple[int, int, int]


@st.composite
def complete_reads(draw: st.DrawFn) -> tuple[list[int], list[list[int]], list[Triple], list[Triple]]:
    """Winners, the declared maps' ranges, and every batch and seal of the winning attempts."""
    num_maps = draw(st.integers(1, 8))
    winners = draw(st.lists(st.integers(0, 2), min_size=num_maps, max_size=num_maps))
    declared = sorted(draw(st.sets(st.integers(0, num_maps - 1))))
    batches: list[Triple] = []
    seals: list[Triple] = []
    for m in declared:
        count = draw(st.integers(0, 4))
        batches.extend((m, winners[m], b) for b in range(count))
        seals.append((m, winners[m], count))
    ranges = [[m, m + 1] for m in declared]
    return winners, ranges, batches, seals


@st.composite
def losers(draw: st.DrawFn, winners: list[int]) -> list[Triple]:
    """Batches or seals of attempts that did not win, of any map, with any id."""
    n = len(winners)
    items = st.tuples(st.integers(0, n + 2), st.integers(0, 3), st.integers(0, 6))
    return [t for t in draw(st.lists(items, max_size=8)) if t[0] >= n or t[1] != winners[t[0]]]


@given(complete_reads(), st.data())
def test_a_complete_read_passes_whatever_losers_sent(
    read: tuple[list[int], list[list[int]], list[Triple], list[Triple]], data: st.DataObject
) -> None:
    winners, ranges, batches, seals = read
    noise = data.draw(losers(winners))
    noise_seals = data.draw(losers(winners))
    # repeats (a revive resends batches to a new epoch; two copies were read) do not matter
    verdict = prove(3, winners, batches + noise + batches, seals + noise_seals, ranges)
    assert verdict.complete and verdict.pairs == []


@given(complete_reads(), st.data())
def test_removing_any_batches_or_seals_is_detected(
    read: tuple[list[int], list[list[int]], list[Triple], list[Triple]], data: st.DataObject
) -> None:
    winners, ranges, batches, seals = read
    items = [("batch", t) for t in batches] + [("seal", t) for t in seals]
    assume(items)
    gone = data.draw(st.sets(st.sampled_from(range(len(items))), min_size=1))
    noise = data.draw(losers(winners))
    kept_batches = [t for i, (kind, t) in enumerate(items) if kind == "batch" and i not in gone]
    kept_seals = [t for i, (kind, t) in enumerate(items) if kind == "seal" and i not in gone]
    verdict = prove(3, winners, kept_batches + noise, kept_seals + noise, ranges)
    assert not verdict.complete
    lost_maps = {items[i][1][0] for i in gone}
    assert {m for m, p in verdict.pairs} == lost_maps and {p for _, p in verdict.pairs} == {3}


def test_each_reason_is_named() -> None:
    def reasons(verdict: Verdict) -> list[str]:
        return [str(x) for x in verdict.missing]

    winners = [0, 1, 0]
    assert reasons(prove(0, winners, [(0, 0, 0)], [], [[0, 1]])) == [
        "map 0: attempt 0: 1 batches but no seal"
    ]
    assert reasons(prove(0, winners, [(0, 0, 1)], [(0, 0, 3)], [[0, 1]])) == [
        "map 0: attempt 0: 2 of 3 batches missing (0, 2)"
    ]
    assert reasons(prove(0, winners, [(1, 1, 0), (1, 1, 1)], [(1, 1, 1)], [[1, 2]])) == [
        "map 1: attempt 1: batches [1] beyond its seal of 1"
    ]
    assert reasons(prove(0, winners, [(2, 0, 0)], [(2, 0, 1)], [])) == [
        "map 2: attempt 0: sent data but did not declare the partition"
    ]
    assert reasons(prove(0, winners, [], [(0, 0, 1), (0, 0, 2)], [[0, 1]])) == [
        "map 0: attempt 0: sealed with 1 and 2 batches"
    ]
    assert reasons(prove(0, [-1], [], [], [[0, 1]])) == ["map 0: no winning attempt"]


def test_an_empty_partition_is_complete_only_when_no_map_declared_it() -> None:
    assert prove(5, [0, 0], [], [], []).complete
    missing = prove(5, [0, 0], [], [], [[0, 2]])
    assert missing.pairs == [[0, 5], [1, 5]]


def test_without_declared_maps_only_the_maps_seen_are_checked() -> None:
    assert prove(0, [0, 0], [], [], None).complete
    assert prove(0, [0, 0], [(1, 0, 0)], [(1, 0, 1)], None).complete
    assert prove(0, [0, 0], [(1, 0, 1)], [(1, 0, 2)], None).pairs == [[1, 0]]


def test_ranges_expand_half_open_and_malformed_ones_are_refused() -> None:
    assert expand_ranges([[0, 2], [5, 6], [7, 7]]) == {0, 1, 5}
    with pytest.raises(ValueError, match="lo <= hi"):
        expand_ranges([[3, 1]])
    with pytest.raises(ValueError, match="lo <= hi"):
        expand_ranges([[1]])
