"""One RDD and one DataFrame query under a Croupier shuffle manager, then under ``sort``, on any
pyspark (run it with that pyspark's Python; it imports nothing of Croupier's):

    python integration/spark/two_managers.py MASTER_URL JAR MANAGER_CLASS

Prints one JSON line: the pyspark version and, for each manager, the results and seconds.
Used by hand to check Spark 4.0-4.2 (docs/guides/spark.md, "Spark 4.0 to 4.2").
"""

from __future__ import annotations

import json
import sys
import time
from operator import add
from typing import Any

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf


def croupier_conf(master: str, jar: str, manager: str) -> dict[str, str]:
    return {
        "spark.jars": jar,
        "spark.shuffle.manager": manager,
        "spark.shuffle.sort.io.plugin.class": "io.croupier.spark.CroupierShuffleDataIO",
        "spark.croupier.master": master,
        "spark.shuffle.service.enabled": "false",
        "spark.dynamicAllocation.shuffleTracking.enabled": "false",
        "spark.sql.adaptive.localShuffleReader.enabled": "false",
        "spark.shuffle.push.enabled": "false",
    }


def run(conf: dict[str, str]) -> dict[str, Any]:
    builder = SparkSession.builder.master("local-cluster[2,1,1024]")
    base = {
        "spark.executor.memory": "900m",
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
    }
    for key, value in {**base, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        sc = spark.sparkContext
        t0 = time.time()
        pairs = sorted(
            sc.parallelize(range(40_000), 8).map(lambda i: (i % 997, i)).reduceByKey(add, 6).collect()
        )
        df = spark.range(100_000).withColumn("k", sf.col("id") % 1009)
        groups = df.groupBy("k").agg(sf.count("*").alias("c"), sf.sum("id").alias("s"))
        row = groups.selectExpr("count(*) AS n", "sum(xxhash64(*) & 4294967295) AS h").collect()[0]
        return {
            "manager": sc.getConf().get("spark.shuffle.manager"),
            "rdd_keys": len(pairs),
            "rdd_sum": sum(v for _, v in pairs),
            "df_rows": row["n"],
            "df_hash": row["h"],
            "seconds": round(time.time() - t0, 1),
        }
    finally:
        spark.stop()


def main() -> None:
    master, jar, manager = sys.argv[1:4]
    out: dict[str, Any] = {"pyspark": pyspark.__version__}
    out["croupier"] = run(croupier_conf(master, jar, manager))
    out["sort"] = run({"spark.shuffle.manager": "sort"})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
