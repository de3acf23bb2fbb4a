"""``croupier verify``'s pure parts: the fault schedule, the records and their check, the
file damage and the report (the runs themselves are in integration/test_verify.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from croupier.storage.index_file import encode_index
from croupier.storage.index_log import LOG_NAME
from croupier.storage.store import LocationKey
from croupier.tools.verify_damage import damage_copy
from croupier.tools.verify_faults import KINDS, PHASES, Fault, parse_faults, schedule
from croupier.tools.verify_report import Report
from croupier.tools.verify_shuffle import Outcome
from croupier.tools.verify_workload import (
    check_partition,
    expected_by_partition,
    make_plan,
    pools,
    record_bytes,
)
from tests.storage.helpers import whole


def test_faults_default_to_every_kind_that_applies_and_corruption_only_after_the_commit() -> None:
    cells = parse_faults("", ha=False)
    assert {k for k, _ in cells} == set(KINDS) - {"leader", "disk-full", "double-kill", "all-gone"}  # by name
    assert {p for k, p in cells if k == "kill"} == set(PHASES)
    assert {p for k, p in cells if k.startswith("corrupt")} == {"after-commit", "mid-read"}
    assert ("leader", "mid-push") in parse_faults(None, ha=True)
    assert parse_faults("kill@mid-read, pause", ha=False)[0] == ("kill", "mid-read")
    assert {p for _, p in parse_faults("disk-full", ha=False)} == {"mid-push", "after-close", "after-commit"}
    assert parse_faults("double-kill", ha=False) == [("double-kill", "after-commit")]


@pytest.mark.parametrize(
    "text",
    ["explode", "kill@never", "corrupt@mid-push", "leader", "disk-full@mid-read", "double-kill@mid-read"],
)
def test_a_fault_that_cannot_be_scheduled_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_faults(text, ha=False)


def test_the_schedule_is_the_seeds_and_visits_every_cell_before_any_twice() -> None:
    cells = parse_faults("", ha=False)
    first = schedule(1, cells, 40, 8)
    assert first == schedule(1, cells, 40, 8) != schedule(2, cells, 40, 8)
    assert {(f.kind, f.phase) for f in first[: len(cells)]} == set(cells)
    assert all(f.restart for f in first if f.damage.endswith("index"))  # else the damage stays unseen
    assert all(0 <= f.partition < 8 and f.role in ("primary", "replica") for f in first)


def test_every_record_is_checked_once_and_loss_duplicates_and_bad_bytes_are_counted() -> None:
    plans = [make_plan(9, m, 20_000, 4) for m in range(2)]
    maps = pools(9, 2)
    expected = expected_by_partition(plans, 4)
    assert all(expected)  # every partition gets records
    written = [
        record_bytes(plan, maps[plan.map_id], p, seq, n)
        for plan in plans
        for p, seq, n in plan.records
        if p == 1
    ]
    assert check_partition(1, expected[1], written, maps).read == len(expected[1])
    clean = check_partition(1, expected[1], written, maps)
    assert (clean.lost, clean.duplicated, clean.bad, clean.problems) == (0, 0, 0, [])
    broken = [*written[1:], written[2], written[3][:-1] + b"?"]
    found = check_partition(1, expected[1], broken, maps)
    assert (found.lost, found.duplicated, found.bad) == (1, 1, 1)
    assert check_partition(2, expected[2], written[:1], maps).bad == 1  # a record from elsewhere


def test_damage_flips_one_byte_or_cuts_ten(tmp_path: Path) -> None:
    folder = tmp_path / "d0" / "app" / "0"
    folder.mkdir(parents=True)
    (folder / "3-0-primary.data").write_bytes(bytes(100))
    (folder / "3-0-primary.index").write_bytes(bytes(50))
    rng = random.Random(1)
    done = damage_copy([tmp_path / "d0"], "app", 0, "3-0-primary", "flip-data", rng)
    assert len(done) == 1 and sum((folder / "3-0-primary.data").read_bytes()) == 0xFF
    damage_copy([tmp_path / "d0"], "app", 0, "3-0-primary", "truncate-index", rng)
    assert len((folder / "3-0-primary.index").read_bytes()) == 40
    assert damage_copy([tmp_path / "d0"], "app", 0, "4-0-primary", "flip-data", rng) == []
    # the copy's record in the dir's index log: only its line, which keeps its end
    lines = [encode_index(LocationKey("app", 0, p, 0, "primary"), whole(100)) for p in (2, 3, 4)]
    (folder / LOG_NAME).write_bytes(b"".join(lines))
    done = damage_copy([tmp_path / "d0"], "app", 0, "3-0-primary", "truncate-index", rng)
    assert done == [
        "cut 10 bytes off 3-0-primary.index",
        "cut 10 bytes off record 2 (3-0-primary) of index.log",
    ]
    assert (folder / LOG_NAME).read_bytes() == lines[0] + lines[1][:-11] + b"\n" + lines[2]
    damage_copy([tmp_path / "d0"], "app", 0, "4-0-primary", "flip-index", rng)
    damaged = (folder / LOG_NAME).read_bytes().splitlines(keepends=True)
    assert damaged[:2] == [lines[0], lines[1][:-11] + b"\n"] and len(damaged[2]) == len(lines[2])
    assert damaged[2] != lines[2] and damaged[2].endswith(b"\n")
    with pytest.raises(ValueError):
        damage_copy([tmp_path / "d0"], "app", 0, "3-0-primary", "melt-data", rng)


def test_the_report_fails_on_silent_loss_a_false_alarm_or_a_missed_one() -> None:
    report = Report(seed=1, ha=False)
    report.add(0, Outcome(Fault("kill", "mid-push", 0, "primary"), fired=True, records=10))
    report.add(
        1,
        Outcome(
            Fault("corrupt-both", "mid-read", 2, "replica", "flip-data"), records=5, expected_data_lost=1
        ),
    )
    assert report.ok and report.to_json()["expected_data_lost"] == 1 and report.total("fired") == 1
    report.add(
        2,
        Outcome(Fault("kill", "mid-push", 1, "replica"), records=10, lost=3, problems=["partition 1: lost"]),
    )
    out = report.to_json()
    assert not out["ok"] and out["lost"] == 3 and out["records"] == 25 and out["shuffles"] == 3
    assert out["failures"] == ["shuffle 3: kill of partition 1 replica at mid-push []: partition 1: lost"]
    cell = next(c for c in out["matrix"] if c["kind"] == "kill")
    assert cell["shuffles"] == 2 and not cell["ok"]
    for outcome in (
        Outcome(Fault("kill", "mid-read", 0, "primary"), false_data_lost=1),
        Outcome(Fault("corrupt-both", "after-commit", 0, "primary"), missed_data_lost=1),
    ):
        alone = Report(seed=1, ha=False)
        alone.add(0, outcome)
        assert not alone.ok


def test_a_double_kill_passes_only_with_its_rerun_and_reports_k_of_n_maps() -> None:
    fault = Fault("double-kill", "after-commit", 3, "primary")
    assert fault.recovers and not fault.double and "both copies of partition 3" in fault.describe()
    report = Report(seed=1, ha=False)
    report.add(0, Outcome(fault, fired=True, records=10, maps=4, rerun_maps=3, expected_data_lost=1))
    out = report.to_json()
    assert out["ok"] and out["rerun_maps"] == 3 and out["maps"] == 4
    assert next(iter(report.cells.values())).rerun == "3/4"
    failed = Report(seed=1, ha=False)
    failed.add(0, Outcome(fault, fired=True, maps=4, errors=["no read needed a rerun"]))
    assert not failed.ok and next(iter(failed.cells.values())).rerun == "-"


def test_verify_puts_the_croupier_log_level_back(capsys: pytest.CaptureFixture[str]) -> None:
    """verify quiets the ``croupier`` logger while it runs, and only then: a caller in the same
    process (the test suite's caplog tests after integration/test_verify.py) keeps its logging."""
    import logging

    from croupier.tools.verify import main_verify

    log = logging.getLogger("croupier")
    before = log.level
    log.setLevel(logging.DEBUG)
    try:
        assert main_verify(1, 0, ha=False, faults="no-such-fault", as_json=False) == 2
        assert "no-such-fault" in capsys.readouterr().err
        assert log.level == logging.DEBUG
    finally:
        log.setLevel(before)
