"""Fixtures of the JVM client's tests: the client jar, built once per session with javac.

Skipped, with the reason, when this machine has no JDK (javac) or no pyspark (whose jars the
client compiles against). CI has both (``./test`` installs the test extra, pyspark included).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark_jars() -> Path:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK here: the JVM client needs javac and java (openjdk-17-jdk-headless)")
    try:
        import pyspark
    except ImportError:
        pytest.skip("pyspark is not installed: pip install -e '.[test]' (it brings the jars javac needs)")
    return Path(pyspark.__file__).parent / "jars"


@pytest.fixture(scope="session")
def client_jar(spark_jars: Path) -> Path:
    from croupier.spark import jar_path

    return jar_path(spark_jars)
