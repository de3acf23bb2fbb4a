"""``MemoryLimiter``: buffered data and held state share one count; held state has its shares."""

from __future__ import annotations

from croupier.storage.limiter import MemoryLimiter


def test_held_state_counts_in_used_and_stops_at_its_share() -> None:
    limiter = MemoryLimiter(1000)  # held: 500 with new locations, 600 for live ones
    assert limiter.try_acquire(10, held=400, grow=True)
    assert (limiter.used, limiter.held) == (410, 400)
    assert not limiter.try_acquire(10, held=200, grow=True)  # 600 > 500
    assert limiter.try_acquire(10, held=200)  # the seals of live locations: up to 600
    assert not limiter.try_acquire(0, held=1)
    assert not limiter.try_hold(1)
    assert (limiter.used, limiter.held, limiter.congested) == (620, 600, 3)
    limiter.release(20, held=600)
    assert (limiter.used, limiter.held) == (0, 0)
    assert limiter.try_hold(500) and limiter.held == 500


def test_held_state_past_its_share_is_refused_even_on_an_empty_worker() -> None:
    limiter = MemoryLimiter(1000)
    assert not limiter.try_acquire(10, held=501, grow=True) and not limiter.try_hold(501)
    assert limiter.try_acquire(2000)  # data: an empty worker takes one message, however large
    assert limiter.try_acquire(0) and limiter.try_acquire(0, held=0, grow=True)  # nothing asked


def test_held_state_under_its_share_never_keeps_the_data_paused() -> None:
    limiter = MemoryLimiter(1000)
    assert limiter.try_acquire(0, held=500, grow=True)
    assert limiter.try_acquire(300)  # 800
    assert not limiter.try_acquire(100)  # 900 > 850: paused
    limiter.release(300)  # flushed: 500 < 700 resumes
    assert limiter.try_acquire(100)
