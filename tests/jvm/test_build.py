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
