# mypy: disable-error-code="no-untyped-call,attr-defined"
# (dask ships partial annotations)
"""Issue 16: ``croupier.dask`` recovers by itself from a double fault after the commit.

Real worker processes: the shuffle commits, both workers holding some partition's copies
are killed (``SIGKILL``), and computing the same result again reruns only the lost maps
(``Shuffle.rerun``) inside the reduces that found the loss. The result is exact, and the
test prints how many maps were rerun out of how many (RELIABILITY.md quotes it).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dask.dataframe")
pytest.importorskip("pyarrow")

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

import croupier
import croupier.dask
from croupier.core.config import ClientConfig
from croupier.services.local import LocalCluster
from integration.procs import fault_cluster
from integration.test_data_plane import wait_lost

pytestmark = pytest.mark.integration

MAPS, PARTITIONS, ROWS = 16, 16, 400
FAST = ClientConfig(rpc_timeout=5.0, fetch_timeout=3.0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with fault_cluster(5, tmp_path / "cluster") as cl:
        yield cl


def make_df() -> dd.DataFrame:
    """Input partition ``i`` holds only key ``i``: each map writes one output partition, so a
    lost partition loses few maps."""
    frames = [
        pd.DataFrame(
            {
                "key": np.full(ROWS, i, dtype=np.int64),
                "id": np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64),
                "x": np.random.default_rng(i).random(ROWS),
            }
        )
        for i in range(MAPS)
    ]
    df: dd.DataFrame = dd.from_delayed(
        [dask.delayed(f) for f in frames], meta=frames[0].iloc[:0], verify_meta=False
    )
    return df


def rows(out: dd.DataFrame, dask_client: Any = None) -> pd.DataFrame:
    if dask_client is not None:
        parts = dask_client.gather(dask_client.compute(out.to_delayed()))
    else:
        with ThreadPoolExecutor(4) as pool:  # its own pool: joined here (the leak check)
            parts = dask.compute(*out.to_delayed(), scheduler="threads", pool=pool)
    return pd.concat(parts).sort_values("id").reset_index(drop=True)


@pytest.fixture(scope="module")
def process_lifetime_helpers() -> None:
    """distributed's process-wide helpers, started before the leak check's snapshot (as in
    tests/sdk/test_dask.py)."""
    import multiprocessing.resource_tracker

    pytest.importorskip("distributed")
    from distributed.utils import _offload_executor

    _offload_executor.submit(lambda: None).result()
    multiprocessing.resource_tracker.ensure_running()


@pytest.fixture(params=["threads", "distributed"])
def dask_client(request: pytest.FixtureRequest, process_lifetime_helpers: None) -> Iterator[Any]:
    """None (the threaded scheduler), or a 2-process ``distributed`` cluster."""
    if request.param == "threads":
        yield None
        return
    pytest.importorskip("distributed")
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_dask_reruns_only_the_lost_maps_after_both_copies_die(
    cluster: LocalCluster, dask_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    df = make_df()
    expected = df.compute(scheduler="sync").sort_values("id").reset_index(drop=True)
    with croupier.dask.ShuffleService(cluster.master_url, config=FAST) as svc:
        spec = svc.register(df, on="key", npartitions=PARTITIONS)
        out = croupier.dask.build_graph(df, spec)
        pd.testing.assert_frame_equal(rows(out, dask_client), expected)  # committed, every copy intact
        with croupier.connect(cluster.master_url) as client:
            sh = client.open_shuffle(spec.app_id, spec.shuffle_id)
            used = next(p for p in range(PARTITIONS) if list(sh.reader(p)))
            location = sh.routing.current(used)
            pair = [location.primary.worker_id, location.replica.worker_id if location.replica else None]
        ids = cluster.worker_ids()
        killed = {cluster.kill_worker(ids.index(w)) for w in pair if w is not None}
        wait_lost(cluster, killed)
        # the same result again: the maps run as superseded attempts, the reduces find the loss
        pd.testing.assert_frame_equal(rows(out, dask_client), expected)
        stats = svc.recovery_stats()[0]
    assert 0 < stats["rerun_maps"] < stats["num_mappers"] == MAPS and stats["lost_maps"] == 0
    with capsys.disabled():
        k, n = stats["rerun_maps"], stats["num_mappers"]
        scheduler = "threads" if dask_client is None else "distributed"
        print(f"\ncroupier.dask ({scheduler}) after a double fault: {k} of {n} maps rerun")
