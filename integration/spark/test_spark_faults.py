"""Spark on Croupier under faults, after ``test_spark.py`` (same SparkContexts, package-scoped
fixtures): the executors lost after the map stage, a Croupier worker killed during it, both
workers of a pair killed after the commit. They run in this order
and leave the Croupier cluster with 2 of its 5 workers."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from croupier.services.local import LocalCluster
from integration.procs import wait_until
from integration.spark.harness import Driver, croupier_app

pytestmark = pytest.mark.timeout(900)


def _map_stages(stages: list[dict[str, Any]], before: set[tuple[int, int]]) -> list[dict[str, Any]]:
    return [s for s in stages if (s["stageId"], s["attemptId"]) not in before]


def _kill_executors(driver: Driver) -> list[int]:
    pids = driver.executor_pids()
    assert len(pids) == 2, pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not set(pids) & set(driver.executor_pids()), timeout=30)
    # the local-cluster's workers start replacements; wait until both registered
    wait_until(lambda: driver.run("executors") == 3, timeout=90, interval=0.5)
    return pids


def test_executors_lost_after_the_map_stage(croupier_driver: Driver, sort_driver: Driver) -> None:
    """kill -9 both executor JVMs after the map stage: under Croupier the next action reads the
    shuffle without running a single map task; under ``sort`` (the control) the maps rerun."""
    runs: dict[str, dict[str, Any]] = {}
    for label, driver in (("croupier", croupier_driver), ("sort", sort_driver)):
        driver.run("keep_partitioned", name="lost-executors")
        before = {(s["stageId"], s["attemptId"]) for s in driver.run("stages")}
        expected = driver.run("read_kept", name="lost-executors")
        mid = {(s["stageId"], s["attemptId"]) for s in driver.run("stages")}
        _kill_executors(driver)
        again = driver.run("read_kept", name="lost-executors")
        assert again == expected
        new = _map_stages(driver.run("stages"), mid)
        runs[label] = {"before": before, "new": new}

    def ran(new: list[dict[str, Any]]) -> int:
        return sum(int(s["numCompleteTasks"]) for s in new if s["status"] == "COMPLETE")

    croupier_new = runs["croupier"]["new"]
    sort_new = runs["sort"]["new"]
    # Croupier: one result stage of 8 tasks, the map stage skipped
    assert ran(croupier_new) == 8, croupier_new
    assert any(s["status"] == "SKIPPED" for s in croupier_new), croupier_new
    # sort: the lost executors' map outputs are recomputed (8 maps) before the 8 reads
    assert ran(sort_new) > 8, sort_new


def test_worker_killed_mid_map_stage(
    croupier_cluster: LocalCluster, croupier_driver: Driver, sort_driver: Driver
) -> None:
    """A Croupier worker dies while maps push: replication and revives absorb it; no stage fails."""
    before = {(s["stageId"], s["attemptId"]) for s in croupier_driver.run("stages")}
    croupier_driver.run("slow_job", name="worker-kill")
    app = croupier_app(croupier_cluster, croupier_driver)

    def maps_ended() -> int:
        rows = [s for s in croupier_cluster.status()["shuffles"] if s["app_id"] == app and not s["committed"]]
        return max((s["mappers_ended"] for s in rows), default=0)

    wait_until(lambda: maps_ended() >= 2, timeout=120, interval=0.2)
    croupier_cluster.kill_worker(0)
    ours = croupier_driver.run("wait", name="worker-kill")
    sort_driver.run("slow_job", name="worker-kill", sleep_s=0.0)
    assert ours == sort_driver.run("wait", name="worker-kill")
    new = _map_stages(croupier_driver.run("stages"), before)
    assert new and all(s["status"] == "COMPLETE" and s["attemptId"] == 0 for s in new), new
    assert sum(s["numFailedTasks"] for s in new) == 0, new


def _kept_shuffle(cluster: LocalCluster, app: str) -> dict[str, Any]:
    """The newest committed 8 x 8 shuffle of ``app`` (what ``keep_partitioned`` wrote)."""
    rows = [
        s
        for s in cluster.status()["shuffles"]
        if s["app_id"] == app and s["committed"] and s["num_mappers"] == 8 and s["num_partitions"] == 8
    ]
    return max(rows, key=lambda s: s["shuffle_id"])


def test_double_fault_after_commit_reruns_only_the_lost_maps(
    croupier_cluster: LocalCluster, croupier_driver: Driver
) -> None:
    """Both workers of one pair die after the commit (kill -9). The reducers get
    DATA_LOST; the driver's endpoint reopens exactly the lost maps and unregisters exactly their
    outputs; Spark's map stage retry runs only those maps (map i wrote only partition i)."""
    croupier_driver.run("keep_partitioned", name="double-fault")
    expected = croupier_driver.run("read_kept", name="double-fault")
    app = croupier_app(croupier_cluster, croupier_driver)
    shuffle = _kept_shuffle(croupier_cluster, app)
    pair = shuffle["pairs"][0]
    ids = croupier_cluster.worker_ids()
    victims = sorted(ids.index(w) for w in pair)
    lost_partitions = [p for p in range(8) if p % len(shuffle["pairs"]) == 0]
    before = {(s["stageId"], s["attemptId"]) for s in croupier_driver.run("stages")}
    for i in victims:
        croupier_cluster.kill_worker(i)
    assert croupier_driver.run("read_kept", name="double-fault") == expected
    new = _map_stages(croupier_driver.run("stages"), before)
    retried = [s for s in new if s["attemptId"] > 0 and s["status"] == "COMPLETE"]
    assert retried, new
    # the map stage's retry (its id is below the reading stage's): exactly the maps that wrote the
    # lost partitions ran again (map i wrote partition i); measured here: 2 of 8 maps
    map_retry = min(retried, key=lambda s: s["stageId"])
    assert map_retry["numTasks"] == len(lost_partitions) < 8, (new, lost_partitions)
