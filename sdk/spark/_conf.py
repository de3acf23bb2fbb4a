"""The Spark settings that make an application shuffle through Croupier.

``settings(master)`` is what ``croupier spark conf --master URL`` prints; ``configure(builder,
master=URL)`` applies it to a ``SparkSession.builder`` (or anything with ``.config(key, value)``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from croupier.spark._build import jar_path, spark_jars_dir, spark_version

__all__ = ["DATA_IO", "MANAGER", "MANAGER_4_3", "configure", "manager_class", "settings"]

#: the shuffle manager for Spark 4.0 to 4.2 (a plain ``ShuffleManager``)
MANAGER = "io.croupier.spark.CroupierShuffleManager"
#: the shuffle manager for Spark 4.3 and later (a ``BlockingShuffleManager``, which 4.3 requires)
MANAGER_4_3 = "io.croupier.spark.CroupierBlockingShuffleManager"
#: the ``ShuffleDataIO`` plug-in: reliable storage, so lost executors' outputs are kept
DATA_IO = "io.croupier.spark.CroupierShuffleDataIO"

_VERSION = re.compile(r"^(\d+)\.(\d+)")
B = TypeVar("B")


def manager_class(version: str) -> str:
    """The ``spark.shuffle.manager`` class for a Spark version (``4.3.0`` -> the blocking one).

    Raises:
        ValueError: the version is not 4.x or later (Spark 3 loads user-jar shuffle managers too late).
    """
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(f"not a Spark version: {version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    if major < 4:
        raise ValueError(f"Spark {version}: Croupier needs Spark 4.0 or later (user-jar shuffle managers)")
    return MANAGER_4_3 if (major, minor) >= (4, 3) else MANAGER


def settings(
    master: str,
    *,
    tenant_token: str | None = None,
    auth_secret_file: str | None = None,
    spark_jars: Path | None = None,
) -> dict[str, str]:
    """The Spark settings for an application on the Croupier cluster at ``master``.

    ``spark_jars`` is Spark's ``jars/`` folder (default ``$SPARK_HOME/jars``, else the installed
    pyspark's); the client jar is built against it when not cached (``jar_path``). With
    ``auth_secret_file``, Spark's own RPC is authenticated with it: shuffle handles, which carry
    the app's Croupier key, travel in task binaries.

    Raises:
        croupier.spark.BuildError: no Spark jars, no JDK, or javac failed.
        ValueError: ``master`` is not a ``tcp://`` URL, or Spark is older than 4.0.
    """
    if not master.startswith("tcp://"):
        raise ValueError(f"--master must be the master's tcp://host:port URL, not {master!r}")
    jars = spark_jars_dir(spark_jars)
    out = {
        "spark.jars": str(jar_path(jars)),
        "spark.shuffle.manager": manager_class(spark_version(jars)),
        "spark.shuffle.sort.io.plugin.class": DATA_IO,
        "spark.croupier.master": master,
        "spark.shuffle.service.enabled": "false",
        "spark.dynamicAllocation.shuffleTracking.enabled": "false",
        "spark.sql.adaptive.localShuffleReader.enabled": "false",
        "spark.shuffle.push.enabled": "false",
    }
    if tenant_token:
        out["spark.croupier.tenantToken"] = tenant_token
    if auth_secret_file:
        out["spark.authenticate"] = "true"
        out["spark.authenticate.secret.file"] = auth_secret_file
    return out


def configure(builder: B, master: str, **options: Any) -> B:
    """Apply ``settings(master, **options)`` to a ``SparkSession.builder`` and return it.

    >>> spark = croupier.spark.configure(SparkSession.builder, master="tcp://h:9097").getOrCreate()
    """
    for key, value in settings(master, **options).items():
        builder = builder.config(key, value)  # type: ignore[attr-defined]
    return builder
