"""Fixtures of the JVM client's tests: the client jar and the test mains, built once with javac.

Skipped, with the reason, when this machine has no JDK (javac) or no pyspark (whose jars the
client compiles against). CI has both (``./test`` installs the test extra, pyspark included).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jvm.harness import build_test_classpath, spark_jars_or_skip


@pytest.fixture(scope="session")
def spark_jars() -> Path:
    return spark_jars_or_skip()


@pytest.fixture(scope="session")
def client_jar(spark_jars: Path) -> Path:
    from croupier.spark import jar_path

    return jar_path(spark_jars)


@pytest.fixture(scope="session")
def java_cp(spark_jars: Path) -> str:
    return build_test_classpath(spark_jars)
