"""``tools/location_cost``: a small run measures every step of real locations."""

from __future__ import annotations

from pathlib import Path

from croupier.tools.location_cost import location_cost


def test_a_small_run_reports_each_step_and_leaves_nothing(tmp_path: Path) -> None:
    row = location_cost(50, str(tmp_path))
    assert row["locations"] == 50
    assert all(row[k] > 0 for k in ("create_us", "first_write_us", "commit_us", "bare_open_creat_us"))
    assert list(tmp_path.iterdir()) == []  # its directory is removed
