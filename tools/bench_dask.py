# mypy: disable-error-code="no-untyped-call"
# (dask and distributed are only partly typed)
"""``croupier bench --scenarios dask``: the same DataFrame shuffle through Croupier and Dask P2P.

One ``distributed.LocalCluster`` (2 worker processes, 1 thread each) and one
embedded Croupier cluster (a master and workers as processes). The input (the
same generator as the team's Dask P2P reference script: a random int64 key and 7
payload columns, 64 B a row) is generated on the Dask workers and persisted
before timing; the timed part is ``shuffle(...).persist()`` and waiting for it.
Both outputs are checked: row count, key sum, and key disjointness across
output partitions.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["dask_scenario"]

KEY_SPACE = 1 << 20


def _make_part(i: int, rows: int) -> Any:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    data: dict[str, Any] = {"key": rng.integers(0, KEY_SPACE, rows, dtype=np.int64)}
    for c in range(4):
        data[f"i{c}"] = rng.integers(0, 1 << 62, rows, dtype=np.int64)
    for c in range(3):
        data[f"f{c}"] = rng.random(rows)
    return pd.DataFrame(data)


def _part_stats(df: Any) -> Any:
    import numpy as np
    import pandas as pd

    keys = np.unique(df["key"].to_numpy())
    return pd.DataFrame({"rows": [len(df)], "keysum": [int(df["key"].sum())], "nunique": [len(keys)]})


def _verify(out: Any, expect: dict[str, int]) -> bool:
    stats = out.map_partitions(_part_stats, meta={"rows": "i8", "keysum": "i8", "nunique": "i8"}).compute()
    return (
        int(stats["rows"].sum()) == expect["rows"]
        and int(stats["keysum"].sum()) == expect["keysum"]
        and int(stats["nunique"].sum()) == expect["nunique"]  # each key in one partition only
    )


def dask_scenario(*, size: int, runs: int, workers: int, nparts: int = 64) -> dict[str, Any]:
    """Median wall time of each method over ``runs``, interleaved, and their ratio."""
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster, wait

    import croupier.dask
    from croupier.services.local import LocalCluster as CroupierCluster

    rows = max(1, size // 64 // nparts)
    times: dict[str, list[float]] = {"croupier": [], "p2p": []}
    verified: dict[str, bool] = {}
    with (
        CroupierCluster(workers, processes=True) as rss,
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as lc,
        Client(lc),
    ):
        parts = [dask.delayed(_make_part)(i, rows) for i in range(nparts)]  # type: ignore[attr-defined]
        df = dd.from_delayed(parts, meta=_make_part(0, 1).iloc[:0]).persist()
        wait(df)
        whole = df.map_partitions(_part_stats, meta={"rows": "i8", "keysum": "i8", "nunique": "i8"}).compute()
        expect = {
            "rows": int(whole["rows"].sum()),
            "keysum": int(whole["keysum"].sum()),
            "nunique": int(df["key"].nunique().compute()),
        }
        with croupier.dask.ShuffleService(rss.master_url) as service:
            for _ in range(runs):
                started = time.perf_counter()
                out = service.shuffle(df, on="key", npartitions=nparts).persist()
                wait(out)
                times["croupier"].append(time.perf_counter() - started)
                verified["croupier"] = verified.get("croupier", True) and _verify(out, expect)
                del out
                started = time.perf_counter()
                ref = df.shuffle(on="key", npartitions=nparts, shuffle_method="p2p", force=True).persist()
                wait(ref)
                times["p2p"].append(time.perf_counter() - started)
                verified["p2p"] = verified.get("p2p", True) and _verify(ref, expect)
                del ref
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "dask": {
            "bytes": rows * nparts * 64,
            "partitions": nparts,
            "seconds": {
                k: {"median": round(med[k], 2), "min": round(min(v), 2), "max": round(max(v), 2)}
                for k, v in times.items()
            },
            "verified": verified,
            "ratio_croupier_to_p2p": round(med["croupier"] / med["p2p"], 3),
            "runs": runs,
        }
    }
