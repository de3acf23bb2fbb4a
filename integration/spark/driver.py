"""A Spark driver that runs the Spark suite's queries on request, in its own process.

    python -m integration.spark.driver CONF_JSON

``CONF_JSON`` holds the Spark settings (``spark.master`` etc.). The driver starts one
SparkSession, prints one JSON line (``{"ready": true, "app_id", "ui"}``), then reads one JSON
request a line on stdin (``{"op": NAME, "args": {...}}``) and answers one JSON line on stdout
(``{"ok": true, "result": ...}`` or ``{"ok": false, "error": TRACEBACK}``). ``{"op": "quit"}``
stops the session. Running Spark in a child process keeps py4j's sockets and threads out of
the test process (its leak checks), and lets one SparkContext serve every test of a module.

Every query returns something order-free (a count and a digest of the sorted rows) or, for
sorts, a digest of the rows in the order Spark returned them, so the same query under the
``sort`` and the Croupier shuffle can be compared.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from operator import add
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

QUERIES: dict[str, Callable[..., Any]] = {}
KEPT: dict[str, Any] = {}  # RDDs kept between requests (the fault tests read them again)
RUNNING: dict[str, threading.Thread] = {}
RESULTS: dict[str, Any] = {}


def query(fn: Callable[..., Any]) -> Callable[..., Any]:
    QUERIES[fn.__name__] = fn
    return fn


def digest(rows: Iterable[Any], ordered: bool = False) -> dict[str, Any]:
    items = [repr(r) for r in rows]
    if not ordered:
        items.sort()
    h = hashlib.sha256()
    for item in items:
        h.update(item.encode())
        h.update(b"\n")
    return {"count": len(items), "sha256": h.hexdigest()}


def df_digest(df: DataFrame) -> dict[str, Any]:
    return df_digest_and_plan(df)[0]


def df_digest_and_plan(df: DataFrame) -> tuple[dict[str, Any], str]:
    """The digest of ``df`` and the final (adaptive) plan of the query that computed it."""
    digest_df = df.selectExpr("count(*) AS n", "sum(xxhash64(*) & 4294967295) AS h")
    row = digest_df.collect()[0]
    plan = digest_df._jdf.queryExecution().executedPlan().toString()
    return {"count": row["n"], "xxhash_sum": row["h"]}, plan


# -- RDD queries ---------------------------------------------------------------------------------


@query
def rdd_reduce_by_key(spark: SparkSession, n: int = 40_000) -> Any:
    rdd = spark.sparkContext.parallelize(range(n), 8).map(lambda i: (i % 997, i))
    return digest(rdd.reduceByKey(add, 6).collect())


@query
def rdd_group_by_key(spark: SparkSession, n: int = 20_000) -> Any:
    rdd = spark.sparkContext.parallelize(range(n), 6).map(lambda i: (i % 501, i))
    return digest((k, sorted(v)) for k, v in rdd.groupByKey(5).collect())


@query
def rdd_sort_by_key(spark: SparkSession, n: int = 20_000) -> Any:
    def pair(i: int) -> tuple[int, int]:
        return ((i * 7919) % n, i)

    rdd = spark.sparkContext.parallelize(range(n), 6).map(pair)
    rows: list[Any] = rdd.sortByKey(ascending=False, numPartitions=5).collect()
    assert all(rows[i][0] >= rows[i + 1][0] for i in range(len(rows) - 1)), "not sorted"
    return digest(rows, ordered=True)


@query
def rdd_join(spark: SparkSession, n: int = 20_000) -> Any:
    sc = spark.sparkContext
    left = sc.parallelize(range(n), 4).map(lambda i: (i % 2000, i))
    right = sc.parallelize(range(0, n, 3), 3).map(lambda i: (i % 1500, -i))
    return digest(left.join(right, 7).map(lambda kv: (kv[0], kv[1][0] + kv[1][1])).collect())


@query
def rdd_big_records(spark: SparkSession, mib: int = 2) -> Any:
    """Records larger than a pushed batch (256 KiB): each one is a batch of its own."""
    sc = spark.sparkContext
    rdd = sc.parallelize(range(12), 4).map(lambda i: (i % 5, bytes([i]) * (mib << 20)))
    return digest((k, sorted((len(b), b[0]) for b in v)) for k, v in rdd.groupByKey(3).collect())


@query
def df_2001_partitions(spark: SparkSession, n: int = 20_000) -> Any:
    """2,001 shuffle partitions: Spark sends a HighlyCompressedMapStatus, and AQE coalesces the
    small partitions into a few reads of partition ranges."""
    before = spark.conf.get("spark.sql.shuffle.partitions") or "200"  # Spark's default when unset
    spark.conf.set("spark.sql.shuffle.partitions", "2001")
    try:
        df = spark.range(n).withColumn("k", sf.col("id") % 5003)
        return df_digest(df.groupBy("k").agg(sf.sum("id").alias("s")))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


# -- DataFrame queries ---------------------------------------------------------------------------


@query
def df_group_by(spark: SparkSession, n: int = 100_000) -> Any:
    df = spark.range(n).withColumn("k", sf.col("id") % 1009)
    return df_digest(df.groupBy("k").agg(sf.count("*").alias("c"), sf.sum("id").alias("s")))


@query
def df_sort_merge_join(spark: SparkSession, n: int = 100_000) -> Any:
    a = spark.range(n).select((sf.col("id") % 50_000).alias("k"), sf.col("id").alias("a"))
    b = spark.range(n // 2).select((sf.col("id") * 3 % 50_000).alias("k"), sf.col("id").alias("b"))
    out, plan = df_digest_and_plan(a.join(b, "k"))
    out["smj"] = "SortMergeJoin" in plan
    return out


@query
def df_order_by(spark: SparkSession, n: int = 30_000) -> Any:
    df = spark.range(n).select(((sf.col("id") * 7919) % 100_003).alias("v"), sf.col("id"))
    rows = [(r["v"], r["id"]) for r in df.orderBy(sf.col("v").desc(), "id").collect()]
    assert rows == sorted(rows, key=lambda r: (-r[0], r[1])), "not sorted"
    return digest(rows, ordered=True)


@query
def df_repartition(spark: SparkSession, n: int = 100_000) -> Any:
    df = spark.range(n).withColumn("x", sf.col("id") * 3)
    out = df_digest(df.repartition(7))
    out["by_col"] = df_digest(df.repartition(5, "x"))
    return out


@query
def df_skew_join(spark: SparkSession, n: int = 100_000) -> Any:
    """Half the rows share one key; AQE must split that partition (maps ranges of it)."""
    big = spark.range(n).select(
        sf.when(sf.col("id") % 2 == 0, sf.lit(0)).otherwise(sf.col("id")).alias("k"), sf.col("id").alias("v")
    )
    small = spark.range(n // 4).select(sf.col("id").alias("k"), (sf.col("id") * 2).alias("w"))
    out, plan = df_digest_and_plan(big.join(small, "k"))
    # the final plan shows "SortMergeJoin(skew=true)" over "AQEShuffleRead ... skewed" reads
    out["skew_split"] = "skewed" in plan and "skew=true" in plan
    out["plan"] = [
        line.strip() for line in plan.splitlines() if "AQEShuffleRead" in line or "SortMergeJoin" in line
    ]
    return out


@query
def df_empty_side(spark: SparkSession, n: int = 20_000) -> Any:
    """One join side is empty at run time (not provably at plan time): its row count must be 0
    and the other side's must not be, or AQE drops the wrong side."""
    left = spark.range(n).select((sf.col("id") % 100).alias("k"), sf.col("id").alias("v"))
    empty = spark.range(n).where(sf.col("id") * 7 % 13 == 100).select(sf.col("id").alias("k"))
    return {
        "left_outer": df_digest(left.join(empty, "k", "left_outer")),
        "inner": df_digest(left.join(empty, "k")),
        "right_outer": df_digest(empty.join(left, "k", "right_outer")),
    }


# -- helpers for the fault tests -----------------------------------------------------------------


@query
def keep_partitioned(
    spark: SparkSession, name: str, maps: int = 8, n: int = 80_000, sleep_map: int = -1, sleep_s: float = 0.0
) -> Any:
    """``partitionBy(maps)`` of keys where map i writes only partition i; counts it (the map
    stage runs and commits) and keeps it under ``name``. ``sleep_map`` sleeps in that map's
    first attempt (a straggler)."""

    def gen(index: int, it: Iterable[int]) -> Iterator[tuple[int, int]]:
        ctx = TaskContext.get()
        if index == sleep_map and ctx is not None and ctx.attemptNumber() == 0:
            time.sleep(sleep_s)
        for i in it:
            yield (index + maps * (i % 1000), i)

    rdd = spark.sparkContext.parallelize(range(n), maps).mapPartitionsWithIndex(gen).partitionBy(maps)
    KEPT[name] = rdd
    return rdd.count()


@query
def straggler(spark: SparkSession, maps: int = 4, n: int = 200_000, sleep_s: float = 0.0) -> Any:
    """``partitionBy(maps)`` where map i writes only partition i. Map 0's first attempt hands
    Spark half its records (enough for several pushed batches at a small batch size), then sleeps
    ``sleep_s``: a straggler whose speculative copy, when Spark runs one, wins. Returns each
    partition's (index, record count, sum of values), and the task attempts of the map stage."""

    def gen(index: int, it: Iterable[int]) -> Iterator[tuple[int, int]]:
        ctx = TaskContext.get()
        items = list(it)
        half = len(items) // 2
        for i in items[:half]:
            yield (index + maps * (i % 1000), i)
        if index == 0 and sleep_s and ctx is not None and ctx.attemptNumber() == 0:
            time.sleep(sleep_s)
        for i in items[half:]:
            yield (index + maps * (i % 1000), i)

    def summary(index: int, it: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
        count = total = 0
        for _, v in it:
            count += 1
            total += v
        yield (index, count, total)

    sc = spark.sparkContext
    if sleep_s:
        # start a Python worker on every executor first: a straggler still starting its Python
        # worker when its copy wins would have pushed nothing for the readers to drop
        sc.parallelize(range(4 * maps), 4 * maps).map(lambda i: i).count()
    seen = {(r["stageId"], r["attemptId"]) for r in _stage_rows(spark)}
    rdd = sc.parallelize(range(n), maps).mapPartitionsWithIndex(gen).partitionBy(maps)
    parts = sorted(rdd.mapPartitionsWithIndex(summary).collect())
    new = [r for r in _stage_rows(spark) if (r["stageId"], r["attemptId"]) not in seen]
    map_stage = min(new, key=lambda r: r["stageId"])
    # a killed straggler's final metrics come with its end, a moment after the job's
    deadline = time.monotonic() + 60
    rows = tasks(spark, map_stage["stageId"], map_stage["attemptId"])
    while any(t["status"] == "RUNNING" for t in rows) and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = tasks(spark, map_stage["stageId"], map_stage["attemptId"])
    return {"partitions": parts, "map_tasks": rows}


@query
def read_kept(spark: SparkSession, name: str) -> Any:
    rdd = KEPT[name]
    return digest(rdd.mapPartitions(lambda it: [sum(v for _, v in it)]).collect())


@query
def slow_job(spark: SparkSession, name: str, maps: int = 6, n: int = 60_000, sleep_s: float = 2.0) -> Any:
    """Starts a job whose maps each sleep ``sleep_s``; ``wait`` returns its result."""

    def run() -> None:
        def gen(index: int, it: Iterable[int]) -> Iterator[tuple[int, int]]:
            time.sleep(sleep_s)
            for i in it:
                yield (i % 777, i)

        try:
            rdd = spark.sparkContext.parallelize(range(n), maps).mapPartitionsWithIndex(gen)
            RESULTS[name] = {"ok": True, "result": digest(rdd.reduceByKey(add, 5).collect())}
        except Exception:
            RESULTS[name] = {"ok": False, "error": traceback.format_exc()}

    spark.sparkContext.setJobGroup(name, name)
    thread = threading.Thread(target=run, name=f"job-{name}", daemon=True)
    RUNNING[name] = thread
    thread.start()
    return True


@query
def wait(spark: SparkSession, name: str, timeout: float = 150.0) -> Any:
    RUNNING.pop(name).join(timeout)
    out = RESULTS.pop(name, {"ok": False, "error": "still running"})
    if not out["ok"]:
        raise RuntimeError(out["error"])
    return out["result"]


@query
def stages(spark: SparkSession) -> Any:
    """Every stage attempt so far, from the driver's REST API: id, attempt, status, tasks."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/stages"
    with urllib.request.urlopen(url, timeout=180) as reply:
        rows = json.load(reply)
    keys = ("stageId", "attemptId", "status", "numTasks", "numCompleteTasks", "numFailedTasks", "name")
    return [{k: r.get(k) for k in keys} for r in rows]


@query
def tasks(spark: SparkSession, stage: int, attempt: int) -> Any:
    """The task attempts of one stage attempt: index, attempt, speculative, status, host, and the
    shuffle bytes it wrote (a killed attempt's too: Spark reports its metrics)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    with urllib.request.urlopen(
        f"{base}/stages/{stage}/{attempt}/taskList?length=10000", timeout=180
    ) as reply:
        rows = json.load(reply)
    out = []
    for r in rows:
        row = {k: r.get(k) for k in ("index", "attempt", "speculative", "status", "host")}
        row["bytes_written"] = (
            (r.get("taskMetrics") or {}).get("shuffleWriteMetrics", {}).get("bytesWritten", 0)
        )
        out.append(row)
    return out


def _stage_rows(spark: SparkSession) -> list[dict[str, Any]]:
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/stages"
    with urllib.request.urlopen(url, timeout=180) as reply:
        return list(json.load(reply))


@query
def timed(spark: SparkSession, query: str, **args: Any) -> Any:
    """Runs ``query``; its wall time, and the executor CPU and shuffle bytes of its stages."""
    seen = {(r["stageId"], r["attemptId"]) for r in _stage_rows(spark)}
    t0 = time.perf_counter()
    result = QUERIES[query](spark, **args)
    wall = time.perf_counter() - t0
    new = [r for r in _stage_rows(spark) if (r["stageId"], r["attemptId"]) not in seen]
    return {
        "result": result,
        "seconds": wall,
        "executor_cpu_s": sum(r.get("executorCpuTime", 0) for r in new) / 1e9,
        "shuffle_write_bytes": sum(r.get("shuffleWriteBytes", 0) for r in new),
        "shuffle_read_bytes": sum(r.get("shuffleReadBytes", 0) for r in new),
    }


@query
def executors(spark: SparkSession) -> Any:
    """Block managers registered (the driver's included)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()


def main() -> None:
    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    answer({"ready": True, "app_id": spark.sparkContext.applicationId, "ui": spark.sparkContext.uiWebUrl})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        try:
            answer({"ok": True, "result": QUERIES[request["op"]](spark, **request.get("args", {}))})
        except Exception:
            answer({"ok": False, "error": traceback.format_exc()})
    spark.stop()
    answer({"stopped": True})


def answer(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
