"""``core.throttle``: which apps are abnormal (a z-score against the other apps, over a floor)."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.throttle import MIN_STD_SHARE, ThrottleRule, abnormal, window_rate, z_scores

FLOOR = 200e6
RULE = ThrottleRule(FLOOR, 3.0)

rates = st.floats(min_value=0.0, max_value=1e12, allow_nan=False)
apps = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), rates, max_size=12)


@given(
    quiet=st.lists(st.floats(min_value=1.0, max_value=FLOOR), min_size=1, max_size=20),
    excess=st.floats(min_value=1.0, max_value=1e12),
)
def test_a_lone_flooder_over_the_floor_is_flagged(quiet: list[float], excess: float) -> None:
    # the quiet apps are at most the floor, so their std is at most floor/2: 2.5 floors
    # above them is more than 3 of their stds (or of the minimum, floor/3) past their mean
    table = {f"quiet-{i}": r for i, r in enumerate(quiet)} | {"flood": 2.5 * FLOOR + excess}
    assert set(abnormal(table, RULE)) == {"flood"}


@given(apps, st.floats(min_value=1.0, max_value=1e10), st.floats(min_value=0.1, max_value=10.0))
def test_an_app_at_or_under_the_floor_never_is(table: dict[str, float], floor: float, z: float) -> None:
    found = abnormal(table, ThrottleRule(floor, z))
    assert all(table[app] > floor for app in found)


@given(
    st.integers(min_value=1, max_value=50),
    rates,
    st.floats(min_value=1.0, max_value=1e10),
    st.floats(min_value=0.1, max_value=10.0),
)
def test_uniform_apps_never_are(n: int, rate: float, floor: float, z: float) -> None:
    assert abnormal({f"app-{i}": rate for i in range(n)}, ThrottleRule(floor, z)) == {}


@given(rates)
def test_an_app_alone_never_is(rate: float) -> None:
    assert abnormal({"only": rate}, RULE) == {}
    assert z_scores({"only": rate, "idle": 0.0}, FLOOR) == {}


@given(apps)
def test_z_scores_are_leave_one_out(table: dict[str, float]) -> None:
    found = z_scores(table, FLOOR)
    active = {app: r for app, r in table.items() if r > 0}
    assert set(found) == (set(active) if len(active) > 1 else set())
    for app, z in found.items():
        others = [r for other, r in active.items() if other != app]
        std = max(statistics.pstdev(others), FLOOR * MIN_STD_SHARE)
        expected = (active[app] - statistics.fmean(others)) / std
        assert math.isclose(z, expected, rel_tol=1e-6, abs_tol=1e-3)


def test_one_other_app_needs_the_floor_above_it() -> None:
    # one other app: std 0, so the minimum floor/3 applies; z > 3 means more than a floor above it
    assert abnormal({"big": 1000e6, "also-big": 900e6}, RULE) == {}
    assert set(abnormal({"big": 1000e6, "small": 10e6}, RULE)) == {"big"}
    assert abnormal({"big": 150e6, "small": 1e6}, RULE) == {}  # under the floor


def test_two_equal_flooders_mask_each_other() -> None:
    table = {"flood-1": 1000e6, "flood-2": 1000e6, "quiet": 1e6}
    assert abnormal(table, RULE) == {}


def test_the_rule_wants_positive_numbers() -> None:
    RULE.validate()
    for bad in (
        ThrottleRule(0, 3),
        ThrottleRule(1, -1),
        ThrottleRule(math.inf, 3),
        ThrottleRule(1, math.nan),
    ):
        with pytest.raises(ValueError):
            bad.validate()


def test_a_rate_is_over_the_time_the_window_saw_the_app() -> None:
    # a 10 s window whose oldest counter began at t=90; now t=100
    assert window_rate(1000, 100.0, 90.0, 0.0, 1.0) == 100.0
    assert window_rate(1000, 100.0, 90.0, 98.0, 1.0) == 500.0  # first seen 2 s ago
    assert window_rate(1000, 100.0, 90.0, 99.9, 1.0) == 1000.0  # at least one counter's width
