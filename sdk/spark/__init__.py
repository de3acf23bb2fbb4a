"""Croupier for Apache Spark: the JVM client jar (``clients/jvm``), built on demand with ``javac``.

``croupier.spark.jar_path()`` compiles the Java sources shipped with this package against
Spark's own jars (``$SPARK_HOME/jars`` or the installed pyspark's) and returns the cached jar.
``croupier.spark.configure(SparkSession.builder, master=URL)`` sets everything an application
needs to shuffle through Croupier (``croupier.spark.settings``; ``croupier spark conf`` prints it).
"""

from __future__ import annotations

from croupier.spark._build import BuildError, jar_path, spark_jars_dir, spark_version
from croupier.spark._conf import DATA_IO, MANAGER, MANAGER_4_3, configure, manager_class, settings

__all__ = [
    "DATA_IO",
    "MANAGER",
    "MANAGER_4_3",
    "BuildError",
    "configure",
    "jar_path",
    "manager_class",
    "settings",
    "spark_jars_dir",
    "spark_version",
]
