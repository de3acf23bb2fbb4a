"""Croupier for Apache Spark: the JVM client jar (``clients/jvm``), built on demand with ``javac``.

``croupier.spark.jar_path()`` compiles the Java sources shipped with this package against
Spark's own jars (``$SPARK_HOME/jars`` or the installed pyspark's) and returns the cached jar.
"""

from __future__ import annotations

from croupier.spark._build import BuildError, jar_path, spark_jars_dir, spark_version

__all__ = ["BuildError", "jar_path", "spark_jars_dir", "spark_version"]
