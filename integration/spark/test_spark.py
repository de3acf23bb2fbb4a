"""Spark on Croupier, end to end: every query's result equals the same query's under Spark's own
``sort`` shuffle, on ``local-cluster[2,1,1024]`` (two executor JVMs) and a Croupier cluster of
processes (a master and 5 workers); then the faults a remote shuffle service is for.

One SparkContext per shuffle manager serves the whole module (``conftest.Driver``): a Spark
start costs ~15 s here. The faults come last, in order, since they change the clusters.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from croupier.services.local import LocalCluster
from integration.spark.harness import Driver, croupier_app, jvms_of

# a SparkContext takes 15 s to start on a quiet machine, minutes on a loaded one; the first test
# waits for both
pytestmark = pytest.mark.timeout(900)

QUERIES = [
    "rdd_reduce_by_key",
    "rdd_group_by_key",
    "rdd_sort_by_key",
    "rdd_join",
    "df_group_by",
    "df_sort_merge_join",
    "df_order_by",
    "df_repartition",
    "df_empty_side",
    "df_2001_partitions",
    "rdd_big_records",
]


@pytest.mark.parametrize("name", QUERIES)
def test_query_equals_sort_shuffle(name: str, croupier_driver: Driver, sort_driver: Driver) -> None:
    ours = croupier_driver.run(name)
    theirs = sort_driver.run(name)
    assert ours == theirs
    assert _count(ours) > 0 or name == "df_empty_side"


def _count(result: Any) -> int:
    return int(result.get("count", 0)) if isinstance(result, dict) else 0


def test_skewed_join_is_split_and_equal(croupier_driver: Driver, sort_driver: Driver) -> None:
    ours = croupier_driver.run("df_skew_join")
    theirs = sort_driver.run("df_skew_join")
    assert ours["skew_split"], (
        f"AQE did not split the skewed partition (map-range reads untested): {ours['plan']}"
    )
    assert theirs["skew_split"], theirs["plan"]
    assert (ours["count"], ours["xxhash_sum"]) == (theirs["count"], theirs["xxhash_sum"])


def test_croupier_shuffles_are_committed(croupier_cluster: LocalCluster, croupier_driver: Driver) -> None:
    """The queries above really went through Croupier: its master has this app's shuffles."""
    status = croupier_cluster.status()
    app = croupier_app(croupier_cluster, croupier_driver)
    ours = [s for s in status["shuffles"] if s["app_id"] == app]
    assert sum(1 for s in ours if s["committed"]) >= len(QUERIES)


def test_spark_jvms_keep_their_temporary_files_in_the_test_directory(
    croupier_driver: Driver, sort_driver: Driver
) -> None:
    """Every JVM of a driver (its own, the local-cluster's workers, the executors) uses the
    driver's directory for java.io.tmpdir: lz4-java's native library, extracted once per JVM,
    was left in /tmp by every run of the suite."""
    mapped: dict[int, set[str]] = {}
    for driver in (croupier_driver, sort_driver):
        assert driver.run("rdd_reduce_by_key", n=2000)["count"] > 0
        for pid in jvms_of(driver):
            libs = {line.split()[-1] for line in _maps(pid) if "liblz4-java" in line}
            mapped[pid] = libs
            outside = [lib for lib in libs if not lib.startswith(str(driver.tmp) + os.sep)]
            assert not outside, f"JVM {pid} of {driver.log_path.parent} loaded {outside}"
    assert any(mapped.values()), f"no JVM loaded lz4-java: {mapped}"


def _maps(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read().splitlines()
    except OSError:
        return []  # it ended meanwhile
