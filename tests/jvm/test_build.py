"""``croupier.spark.jar_path``: the client jar is built with javac, cached, and checked."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from croupier.spark import _build


def test_the_jar_holds_the_public_api(client_jar: Path) -> None:
    names = set(zipfile.ZipFile(client_jar).namelist())
    for cls in ("CroupierClient", "App", "Shuffle", "MapWriter", "BatchReader", "DataLostException"):
        assert f"io/croupier/client/{cls}.class" in names
    assert "io/croupier/zmtp/DealerSocket.class" in names


def test_the_jar_is_cached_per_sources_and_spark_version(client_jar: Path, spark_jars: Path) -> None:
    again = _build.jar_path(spark_jars)
    assert again == client_jar
    assert _build.spark_version(spark_jars) in client_jar.parent.name


def test_missing_javac_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(_build.BuildError, match="javac"):
        _build.compile_jar(_build.java_sources(), [], tmp_path / "x.jar")


def test_jars_without_blake3_are_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "spark-core_2.13-4.3.0.jar").write_bytes(b"")
    with zipfile.ZipFile(tmp_path / "commons-codec-1.15.jar", "w") as zf:
        zf.writestr("org/apache/commons/codec/digest/Md5Crypt.class", b"")
    with pytest.raises(_build.BuildError, match="Blake3"):
        _build._check_blake3(tmp_path)


def test_a_folder_without_spark_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(_build.BuildError, match="no Spark jars"):
        _build.spark_jars_dir(tmp_path)


def _spark_core(folder: Path, *classes: str) -> None:
    with zipfile.ZipFile(folder / "spark-core_2.13-4.2.1.jar", "w") as zf:
        for cls in ("org/apache/spark/shuffle/ShuffleManager.class", *classes):
            zf.writestr(cls, b"")


def test_spark_before_4_3_leaves_out_the_blocking_manager(tmp_path: Path) -> None:
    """Spark 4.0-4.2 have no BlockingShuffleManager: javac would fail on the 4.3 manager (it did,
    against pyspark 4.2.1's jars), so its source is left out and the plain manager is built."""
    _spark_core(tmp_path)
    assert _build.excluded_sources(tmp_path) == {_build.BLOCKING_SOURCE}
    assert (_build.java_sources() / _build.BLOCKING_SOURCE).is_file()
    names = [
        p.relative_to(_build.java_sources()).as_posix()
        for p in _build._source_files(_build.java_sources(), _build.excluded_sources(tmp_path))
    ]
    assert _build.BLOCKING_SOURCE not in names
    assert "io/croupier/spark/CroupierShuffleManager.java" in names


def test_spark_4_3_builds_both_managers(tmp_path: Path, client_jar: Path) -> None:
    _spark_core(tmp_path, "org/apache/spark/shuffle/BlockingShuffleManager.class")
    assert _build.excluded_sources(tmp_path) == frozenset()
    names = set(zipfile.ZipFile(client_jar).namelist())
    assert "io/croupier/spark/CroupierBlockingShuffleManager.class" in names
    assert "io/croupier/spark/CroupierShuffleManager.class" in names
