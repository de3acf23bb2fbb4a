"""Spark on Croupier with speculation: a straggling map's speculative copy wins, and the result
is exact (equal to Spark's ``sort`` shuffle's and to the counts computed here).

Spark runs a speculative copy only on another host than the original's, so this test has its
own Spark standalone cluster whose two workers are named ``127.0.0.1`` and ``localhost``
(``standalone.py``), and its own driver under Croupier (the package's Croupier cluster).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from croupier.services.local import LocalCluster
from integration.spark.harness import Driver, spark_conf
from integration.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.timeout(900)

MAPS, N = 4, 200_000
# a straggler long enough that only a speculative copy ends the stage in reasonable time; Spark
# kills the straggler as soon as the copy wins, so the test does not wait for it
SLEEP_S = 120.0


@pytest.fixture(scope="module")
def speculating_driver(
    croupier_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Driver]:
    from croupier.spark import settings

    base = tmp_path_factory.mktemp("spark-speculation")
    cluster = StandaloneCluster(base / "standalone")
    driver = None
    try:
        conf = spark_conf(
            **settings(croupier_cluster.master_url),
            **{
                "spark.master": cluster.url,
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.cores.max": "2",
                # speculate a task once half the tasks ended and it ran 1.5x their median (1 s at
                # least); the efficiency check is off (it judges by input records, which a sleep in
                # Python does not show)
                "spark.speculation": "true",
                "spark.speculation.interval": "100ms",
                "spark.speculation.quantile": "0.5",
                "spark.speculation.multiplier": "1.5",
                "spark.speculation.minTaskRuntime": "1s",
                "spark.speculation.efficiency.enabled": "false",
                # small batches: the straggler pushes several before it sleeps, which readers must drop
                "spark.croupier.push.batchSize": "16k",
            },
        )
        driver = Driver(conf, base / "driver.log")
        driver.wait_ready()
        yield driver
    finally:
        if driver is not None:
            driver.stop()
        cluster.stop()


def _expected() -> list[list[int]]:
    """Map i gets ``range(N)``'s i-th slice and writes only partition i: its count and sum."""
    size = N // MAPS
    return [[i, size, sum(range(i * size, (i + 1) * size))] for i in range(MAPS)]


def test_speculative_copy_wins_and_results_are_exact(speculating_driver: Driver, sort_driver: Driver) -> None:
    ours = speculating_driver.run("straggler", maps=MAPS, n=N, sleep_s=SLEEP_S)
    theirs = sort_driver.run("straggler", maps=MAPS, n=N)
    # exact: every record of every map once (the straggler's pushed batches dropped)
    assert ours["partitions"] == theirs["partitions"] == _expected()
    attempts: list[dict[str, Any]] = ours["map_tasks"]
    copies = [t for t in attempts if t["index"] == 0 and t["speculative"]]
    assert copies and copies[0]["status"] == "SUCCESS", attempts
    original = [t for t in attempts if t["index"] == 0 and not t["speculative"]]
    assert original and original[0]["host"] != copies[0]["host"], attempts
    # the straggler had pushed batches before it slept (Croupier bytes written), which the
    # readers dropped: they read only the winning attempt (the exact counts above)
    assert original[0]["bytes_written"] > 0, attempts
    # the straggler was killed or lost to the copy: neither fails the task or the stage
    assert not [t for t in attempts if t["status"] == "FAILED"], attempts
    assert sum(t["status"] == "SUCCESS" for t in attempts) >= MAPS, attempts
