"""``croupier verify`` end to end: a short seeded run passes, and the harness catches bugs.

The runs start real processes (3 workers and a master, or a local ZooKeeper and 3
masters with ``--ha``) through the command's own code, in this process so that a test
can plant a bug in the SDK's reader and see the harness report it.

``HOLDING`` lists the fault cells CI runs: every cell but the two during the commit,
which hold too (RELIABILITY.md) but each waits out the master's COMMIT_FILES timeouts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import croupier
from croupier.core.errors import Conflict, DataLostError
from croupier.tools.verify import main_verify
from croupier.tools.verify_faults import schedule
from croupier.tools.verify_shuffle import Shape

pytestmark = pytest.mark.integration

# kill and restart during the commit hold too, but each waits out the master's 20 s
# COMMIT_FILES timeout: too slow for CI
HOLDING = ",".join(
    [
        "kill@mid-push",
        "kill@after-close",
        "kill@after-commit",
        "kill@mid-read",
        "pause",
        "restart@mid-push",
        "restart@after-close",
        "restart@after-commit",
        "restart@mid-read",
        "corrupt",
        "corrupt-both",
    ]
)


def verify(capsys: pytest.CaptureFixture[str], **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """Run ``croupier verify --json`` with ``kwargs``; its exit code and its last JSON line."""
    code = main_verify(as_json=True, **{"ha": False, **kwargs})
    lines = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(lines[-1])


def cells(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["kind"], c["phase"]): c for c in result["matrix"]}


def test_a_seeded_run_of_the_faults_that_hold_reads_every_record_back_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result = verify(capsys, shuffles=17, seed=7, faults=HOLDING)
    assert code == 0, result["failures"]
    assert result["ok"] and result["shuffles"] == result["fired"] == 17 and result["records"] > 17 * 500
    for name in ("lost", "duplicated", "bad", "false_data_lost", "missed_data_lost", "errors"):
        assert result[name] == 0, name
    # one shuffle per cell: the schedule is a shuffled round-robin of the cells
    assert len(cells(result)) == 17 and all(c["shuffles"] == 1 for c in result["matrix"])
    assert {kind for kind, _ in cells(result)} == {"kill", "pause", "restart", "corrupt", "corrupt-both"}


@pytest.mark.zookeeper
def test_a_seeded_ha_run_survives_the_leader_being_killed(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = verify(capsys, shuffles=2, seed=3, faults="leader@mid-push,leader@after-commit", ha=True)
    assert code == 0, result["failures"]
    assert result["ha"] and result["shuffles"] == result["fired"] == 2
    assert result["lost"] == result["duplicated"] == result["errors"] == 0
    assert set(cells(result)) == {("leader", "mid-push"), ("leader", "after-commit")}


def test_both_copies_of_a_partition_damaged_is_a_data_lost_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # seed 5 draws a damaged .data on both copies: the reader must raise, naming the partition
    fault = schedule(5, [("corrupt-both", "after-commit")], 1, Shape().partitions)[0]
    assert fault.damage.endswith("-data")
    code, result = verify(capsys, shuffles=1, seed=5, faults="corrupt-both@after-commit")
    assert code == 0, result["failures"]
    assert result["expected_data_lost"] == result["fired"] == 1
    assert result["false_data_lost"] == result["missed_data_lost"] == result["lost"] == 0


def test_both_copy_holders_killed_after_the_commit_is_recovered_by_a_rerun(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result = verify(capsys, shuffles=1, seed=1, faults="double-kill")
    assert code == 0, result["failures"]
    assert result["fired"] == result["expected_data_lost"] == 1
    assert 0 < result["rerun_maps"] <= result["maps"] == Shape().maps
    for name in ("lost", "duplicated", "bad", "false_data_lost", "missed_data_lost", "errors"):
        assert result[name] == 0, name


@pytest.mark.usefixtures("no_rerun")
def test_verify_fails_a_double_kill_it_could_not_recover_from(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = verify(capsys, shuffles=1, seed=1, faults="double-kill")
    assert code == 1 and result["rerun_maps"] == 0 and result["errors"] >= 1


@pytest.fixture
def no_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    """A master that refuses every rerun."""

    def refuse(self: croupier.Shuffle, maps: object) -> None:
        raise Conflict("planted: no rerun")

    monkeypatch.setattr(croupier.Shuffle, "rerun", refuse)


@pytest.fixture
def drop_a_batch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A reader bug: the first partition read loses three records, as if a batch were skipped."""
    original = croupier.Reader.__iter__
    dropped: list[int] = []

    def leaky(self: croupier.Reader) -> Iterator[bytes]:
        for n, record in enumerate(original(self)):
            if not dropped or dropped[0] == self.partition:
                dropped[:1] = [self.partition]
                if 3 <= n < 6:
                    continue
            yield record

    monkeypatch.setattr(croupier.Reader, "__iter__", leaky)
    yield


@pytest.mark.usefixtures("drop_a_batch")
def test_verify_reports_records_a_reader_dropped_and_exits_non_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, result = verify(capsys, shuffles=1, seed=1, faults="restart@after-commit")
    assert code == 1
    assert not result["ok"] and result["fired"] == 1 and result["lost"] == 3 and result["duplicated"] == 0
    assert "lost" in result["failures"][0]


def test_verify_reports_a_data_lost_no_fault_explains(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = croupier.Reader.__iter__

    def alarmist(self: croupier.Reader) -> Iterator[bytes]:
        if self.partition == 0:
            raise DataLostError.of([0], ["w-nobody"], "planted")
        return original(self)

    monkeypatch.setattr(croupier.Reader, "__iter__", alarmist)
    code, result = verify(capsys, shuffles=1, seed=1, faults="restart@after-commit")
    assert code == 1
    assert result["false_data_lost"] == 1 and result["expected_data_lost"] == 0 and result["lost"] == 0


def test_verify_reports_both_copies_damaged_but_no_data_lost_raised(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = croupier.Reader.__iter__

    def silent(self: croupier.Reader) -> Iterator[bytes]:
        try:
            yield from original(self)
        except DataLostError:
            return  # the bug: a partition whose copies are gone reads back short

    monkeypatch.setattr(croupier.Reader, "__iter__", silent)
    # seed 5 truncates both copies' data files: the same last batch is gone from both (a flipped
    # byte in each copy, as seed 2 draws, spoils two different batches, and readers now read
    # every intact batch of either copy: nothing is lost there, PROTOCOL §5.3)
    code, result = verify(capsys, shuffles=1, seed=5, faults="corrupt-both@after-commit")
    assert code == 1
    assert result["fired"] == 1 and result["missed_data_lost"] == 1 and result["expected_data_lost"] == 0
    assert result["false_data_lost"] == 0


def test_every_worker_killed_after_the_offload_reads_every_record_once_from_the_store(
    capsys: pytest.CaptureFixture[str], seaweed: Any
) -> None:
    code, result = verify(
        capsys, shuffles=1, seed=1, faults="all-gone", object_store=seaweed.new_bucket_url()
    )
    assert code == 0, result["failures"]
    assert result["fired"] == 1 and result["records"] > 500
    assert set(cells(result)) == {("all-gone", "after-commit")}
    for name in ("lost", "duplicated", "bad", "false_data_lost", "expected_data_lost", "errors"):
        assert result[name] == 0, name


def test_all_gone_needs_an_object_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_verify(1, 1, ha=False, faults="all-gone", as_json=True) == 2
    assert "--object-store" in capsys.readouterr().err
