"""``tools/location_rss``: a small run against real server processes counts what it claims."""

from __future__ import annotations

from croupier.tools.location_rss import measure


def test_a_small_cap_refuses_new_locations_and_counts_their_state() -> None:
    row = measure(3000, 4 << 20, code=None, per_shuffle=2000, per_push=100)
    assert row.accepted + row.refused == 3000
    assert 0 < row.accepted < 3000  # 2 MiB of held state is about 480 locations
    assert row.live_locations == row.accepted
    assert row.memory_used >= row.accepted * 1024
    assert row.rss_after > row.rss_before > 0
