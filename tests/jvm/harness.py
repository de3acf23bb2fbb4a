"""Build and run the JVM client's Java test mains (``clients/jvm/src/test/java``).

The client jar comes from ``croupier.spark.jar_path`` (cached per sources and Spark version);
the test classes are compiled against it once per source change, cached the same way, so a
test session compiles at most once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from croupier.spark import _build

TEST_SOURCES = Path(__file__).resolve().parents[2] / "clients" / "jvm" / "src" / "test" / "java"


def spark_jars_or_skip() -> Path:
    """pyspark's jars folder; skips the test when there is no JDK or no pyspark."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK here: the JVM client needs javac and java (openjdk-17-jdk-headless)")
    try:
        import pyspark
    except ImportError:
        pytest.skip("pyspark is not installed: pip install -e '.[test]' (it brings the jars javac needs)")
    return Path(pyspark.__file__).parent / "jars"


def build_test_classpath(spark_jars: Path) -> str:
    """The class path of the test mains: their jar, the client jar, Spark's jars."""
    client = _build.jar_path(spark_jars)
    digest = hashlib.sha256(str(client).encode())
    for path in sorted(TEST_SOURCES.rglob("*.java")):
        digest.update(str(path.relative_to(TEST_SOURCES)).encode() + b"\0" + path.read_bytes())
    out = client.parent / f"tests-{digest.hexdigest()[:16]}.jar"
    if not out.is_file():
        _build.compile_jar(TEST_SOURCES, [str(client), str(spark_jars / "*")], out)
    return os.pathsep.join([str(out), str(client), str(spark_jars / "*")])


def run_java(
    classpath: str, main: str, *args: str, timeout: float = 120.0, check: bool = True, jit: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``java -cp classpath main args`` and return its output; fail the test on a non-zero exit.

    The JVM starts fast (C1 only) unless ``jit``: measurements want the optimizing compiler.
    """
    flags = [] if jit else ["-XX:TieredStopAtLevel=1"]
    done = subprocess.run(
        ["java", "-Xss4m", "-XX:+UseSerialGC", *flags, "-cp", classpath, main, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        pytest.fail(f"java {main} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done
