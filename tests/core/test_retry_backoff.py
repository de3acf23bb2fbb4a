"""The offload's retry policy (core/retry_backoff.py): capped doubling, ever rarer warnings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.retry_backoff import RetryBackoff

firsts = st.floats(min_value=0.001, max_value=10.0)
caps = st.floats(min_value=0.001, max_value=3600.0)


def test_one_second_doubling_to_thirty() -> None:
    b = RetryBackoff(1.0, 30.0)
    assert [b.delay(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert b.delay(10**9) == 30.0  # no overflow however long the outage


@given(firsts, caps, st.integers(min_value=1, max_value=10_000))
def test_delays_start_at_first_never_pass_the_cap_and_never_shrink(first: float, cap: float, n: int) -> None:
    first = min(first, cap)
    b = RetryBackoff(first, cap)
    assert b.delay(1) == first
    assert first <= b.delay(n) <= cap
    assert b.delay(n) <= b.delay(n + 1)
    assert b.delay(n + 1) in (cap, 2 * b.delay(n))  # doubles until capped


@given(st.integers(min_value=1, max_value=2**20))
def test_warnings_get_rarer_the_first_is_always_loud(n: int) -> None:
    assert RetryBackoff.loud(1)
    loud = sum(RetryBackoff.loud(k) for k in range(1, n + 1))
    assert loud == n.bit_length()  # the powers of two up to n: a logarithmic number


@pytest.mark.parametrize(("first", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_a_nonsense_policy_is_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="first"):
        RetryBackoff(first, cap)


def test_failures_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        RetryBackoff().delay(0)
