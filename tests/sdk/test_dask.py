# mypy: disable-error-code="no-untyped-call,attr-defined"
# (dask and distributed ship partial annotations: many untyped functions, implicit re-exports)
"""``croupier.dask``: Dask DataFrame shuffles through a real Croupier ``LocalCluster``.

The quick tests use Dask's synchronous or threaded scheduler; two run on a
``distributed.LocalCluster`` (2 worker processes, started and closed per test).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dask.dataframe")
pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

import croupier.dask
from croupier.core.config import ClientConfig
from croupier.services.local import LocalCluster


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with LocalCluster(workers=3, base_dir=tmp_path) as cluster:
        yield cluster.master_url


@pytest.fixture(scope="module")
def process_lifetime_helpers() -> None:
    """Start the two process-wide helpers a ``distributed`` cluster uses, before ``no_leaks`` snapshots.

    * ``distributed.utils._offload_executor``: a one-thread pool ("Dask-Offload_0") that
      distributed keeps for the life of the process (shut down only by a
      ``weakref.finalize`` at exit);
    * ``multiprocessing``'s resource tracker: one child process, started by the first
      ``spawn`` of a worker process and kept until the parent exits (it ends on EOF of
      its pipe).

    Both start lazily, on first use, which would be inside the first distributed test;
    being module-scoped, this fixture runs before the function-scoped ``no_leaks``
    snapshot. Nothing else is ignored: the client, the scheduler, the nannies and the
    worker processes must all end within each test.
    """
    import multiprocessing.resource_tracker

    from distributed.utils import _offload_executor

    _offload_executor.submit(lambda: None).result()
    multiprocessing.resource_tracker.ensure_running()


@pytest.fixture
def dask_client(process_lifetime_helpers: None) -> Iterator[Any]:
    """A 2-process ``distributed`` cluster; closed (worker processes joined) before the leak check."""
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            # not None: distributed then still serves HTTP on 8787 and warns (= fails) if it is taken
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def make_pdf(rows: int, *, seed: int = 0, keys: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "key": rng.integers(0, keys, rows, dtype=np.int64),
            "name": [f"n{i % 17}" for i in range(rows)],
            "x": rng.random(rows),
            "id": np.arange(rows, dtype=np.int64),
        }
    )


def partitions(out: dd.DataFrame, **compute_kwargs: Any) -> list[pd.DataFrame]:
    parts: list[pd.DataFrame] = list(dask.compute(*out.to_delayed(), **compute_kwargs))
    return parts


def check_shuffled(df: dd.DataFrame, out: dd.DataFrame, on: str | list[str], **compute_kwargs: Any) -> None:
    """Same rows (and index), same dtypes, and every key in exactly one output partition."""
    expected = df.compute(**compute_kwargs)
    parts = partitions(out, **compute_kwargs)
    assert len(parts) == out.npartitions
    for part in parts:
        assert part.dtypes.to_dict() == df._meta.dtypes.to_dict()
        assert list(part.columns) == list(df.columns)
    got = pd.concat(parts)
    assert len(got) == len(expected)
    if pd.api.types.is_numeric_dtype(expected[on if isinstance(on, str) else on[0]]):
        key = on if isinstance(on, str) else on[0]
        assert int(got[key].sum()) == int(expected[key].sum())
    cols = [on] if isinstance(on, str) else list(on)
    seen: dict[tuple[Any, ...], int] = {}
    for i, part in enumerate(parts):
        for k in part[cols].drop_duplicates().itertuples(index=False, name=None):
            assert seen.setdefault(k, i) == i, f"key {k} in partitions {seen[k]} and {i}"
    pd.testing.assert_frame_equal(got.sort_values("id"), expected.sort_values("id"))


def test_sync_scheduler_int_keys(url: str, config: ClientConfig) -> None:
    df = dd.from_pandas(make_pdf(3000), npartitions=4)
    with croupier.dask.ShuffleService(url, config=config) as svc:
        out = svc.shuffle(df, on="key", npartitions=7)
        assert out.npartitions == 7
        assert out._meta.dtypes.to_dict() == df._meta.dtypes.to_dict()
        check_shuffled(df, out, "key", scheduler="sync")


def test_threaded_scheduler_string_and_multi_column_keys(url: str, config: ClientConfig) -> None:
    df = dd.from_pandas(make_pdf(2000, seed=1), npartitions=5)
    # our own pool: dask's default one is process-wide and its threads never end
    with ThreadPoolExecutor(4) as pool, croupier.dask.ShuffleService(url, config=config) as svc:
        run = {"scheduler": "threads", "pool": pool}
        check_shuffled(df, svc.shuffle(df, on="name", npartitions=3), "name", **run)
        check_shuffled(df, svc.shuffle(df, on=["key", "name"]), ["key", "name"], **run)


def test_empty_input_partition_and_empty_output_partitions(url: str, config: ClientConfig) -> None:
    pdf = make_pdf(600, seed=2, keys=3)
    pieces = [pdf.iloc[:300], pdf.iloc[:0], pdf.iloc[300:]]
    df = dd.from_delayed([dask.delayed(p) for p in pieces], meta=pdf.iloc[:0])
    with croupier.dask.ShuffleService(url, config=config) as svc:
        out = svc.shuffle(df, on="key", npartitions=8)  # 3 keys: at least 5 empty outputs
        parts = partitions(out, scheduler="sync")
        assert sum(1 for p in parts if len(p) == 0) >= 5
        check_shuffled(df, out, "key", scheduler="sync")


def test_a_map_that_runs_twice_counts_once(url: str, config: ClientConfig) -> None:
    pdf = make_pdf(1000, seed=3)
    df = dd.from_pandas(pdf, npartitions=3)
    first = df.partitions[0].compute(scheduler="sync")
    with croupier.dask.ShuffleService(url, config=config) as svc:
        spec = svc.register(df, on="key", npartitions=4)
        ran = croupier.dask.map_partition(first, 0, spec, attempt_id=1)
        assert ran["won"] and ran["rows"] == len(first)
        # a second execution of map 0 (retry, speculation) pushing other data: it must not count
        other = make_pdf(len(first), seed=99).assign(id=-1)
        again = croupier.dask.map_partition(other, 0, spec, attempt_id=2)
        assert again["won"] is False
        out = croupier.dask.build_graph(df, spec)  # map 0 runs a third time, with a fresh attempt
        check_shuffled(df, out, "key", scheduler="sync")


def test_recompute_after_commit_gives_the_same_rows(url: str, config: ClientConfig) -> None:
    df = dd.from_pandas(make_pdf(800, seed=4), npartitions=2)
    with croupier.dask.ShuffleService(url, config=config) as svc:
        out = svc.shuffle(df, on="key", npartitions=3)
        one = partitions(out, scheduler="sync")
        two = partitions(out, scheduler="sync")  # every map attempt is superseded now
        for a, b in zip(one, two, strict=True):
            pd.testing.assert_frame_equal(a.sort_values("id"), b.sort_values("id"))


def test_shuffle_function(url: str, config: ClientConfig) -> None:
    df = dd.from_pandas(make_pdf(500, seed=5), npartitions=2)
    out = croupier.dask.shuffle(df, on="key", npartitions=3, url=url, config=config)
    check_shuffled(df, out, "key", scheduler="sync")


def test_bad_arguments(url: str, config: ClientConfig) -> None:
    df = dd.from_pandas(make_pdf(10), npartitions=2)
    with croupier.dask.ShuffleService(url, config=config) as svc:
        with pytest.raises(KeyError):
            svc.shuffle(df, on="nope")
        with pytest.raises(ValueError, match="npartitions"):
            svc.shuffle(df, on="key", npartitions=0)
        with pytest.raises(ValueError, match="at least one"):
            svc.shuffle(df, on=[])


def test_distributed_int_keys(url: str, config: ClientConfig, dask_client: Any) -> None:
    df = dd.from_pandas(make_pdf(20_000, seed=6, keys=1000), npartitions=6)
    with croupier.dask.ShuffleService(url, config=config) as svc:
        check_shuffled(df, svc.shuffle(df, on="key", npartitions=5), "key")


def test_distributed_string_keys_with_an_empty_partition(
    url: str, config: ClientConfig, dask_client: Any
) -> None:
    pdf = make_pdf(5000, seed=7)
    pieces = [pdf.iloc[:2000], pdf.iloc[:0], pdf.iloc[2000:]]
    df = dd.from_delayed([dask.delayed(p) for p in pieces], meta=pdf.iloc[:0])
    with croupier.dask.ShuffleService(url, config=config) as svc:
        check_shuffled(df, svc.shuffle(df, on="name", npartitions=4), "name")


def test_tasks_open_the_shuffle_by_its_handle_on_a_cluster_with_a_secret(
    tmp_path: Path, config: ClientConfig
) -> None:
    """Every task's own client opens the shuffle by the spec's handle, so its batches carry the
    app key's digests; the key stays out of the spec's repr."""
    from tests.sdk.secure import SECRET, secure_cluster

    df = dd.from_pandas(make_pdf(1500, seed=8), npartitions=3)
    with (
        secure_cluster(tmp_path, workers=2) as cluster,
        croupier.dask.ShuffleService(cluster.master_url, config=config) as svc,
    ):
        out = svc.shuffle(df, on="key", npartitions=4)
        spec = svc.specs[0]
        assert svc._app is not None and svc._app.app_key is not None
        key = svc._app.app_key.hex()
        assert svc._app.app_key != SECRET.app_key(svc.app_id)  # keyed by its registration too
        assert spec.handle is not None and spec.handle.endswith(key) and key not in repr(spec)
        check_shuffled(df, out, "key", scheduler="sync")
        croupier.dask.unregister(cluster.master_url, spec.handle)  # the handle carries the key
        with croupier.connect(cluster.master_url) as other, pytest.raises(croupier.UnknownApp):
            other.open_shuffle(spec.handle)
