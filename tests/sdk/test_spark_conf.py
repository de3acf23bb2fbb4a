"""``croupier.spark.settings``, ``configure`` and ``croupier spark conf``: what an app needs."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

import pytest

from croupier.services.cli import main
from croupier.spark import DATA_IO, MANAGER, MANAGER_4_3, configure, manager_class, settings

needs_spark = pytest.mark.skipif(
    shutil.which("javac") is None or importlib.util.find_spec("pyspark") is None,
    reason="building the client jar needs javac and pyspark",
)


def test_the_manager_class_follows_the_spark_version() -> None:
    assert manager_class("4.3.0") == MANAGER_4_3
    assert manager_class("4.10.1") == MANAGER_4_3
    assert manager_class("4.2.1") == MANAGER
    assert manager_class("4.0.0") == MANAGER
    with pytest.raises(ValueError, match=r"4\.0 or later"):
        manager_class("3.5.9")
    with pytest.raises(ValueError, match="not a Spark version"):
        manager_class("latest")


def test_the_master_must_be_a_tcp_url() -> None:
    with pytest.raises(ValueError, match="tcp://"):
        settings("zk://h:2181/croupier")


class Builder:
    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def config(self, key: str, value: Any) -> Builder:
        self.conf[key] = value
        return self


@needs_spark
def test_configure_sets_everything_conf_prints(capsys: pytest.CaptureFixture[str]) -> None:
    builder = configure(Builder(), master="tcp://127.0.0.1:9097", tenant_token="t0k")
    assert builder.conf["spark.shuffle.manager"] == MANAGER_4_3  # pyspark 4.3.0 in the test extra
    assert builder.conf["spark.shuffle.sort.io.plugin.class"] == DATA_IO
    assert builder.conf["spark.croupier.master"] == "tcp://127.0.0.1:9097"
    assert builder.conf["spark.croupier.tenantToken"] == "t0k"
    assert builder.conf["spark.jars"].endswith("croupier-client.jar")
    for key in (
        "spark.shuffle.service.enabled",
        "spark.dynamicAllocation.shuffleTracking.enabled",
        "spark.sql.adaptive.localShuffleReader.enabled",
        "spark.shuffle.push.enabled",
    ):
        assert builder.conf[key] == "false"
    assert main(["spark", "conf", "--master", "tcp://127.0.0.1:9097", "--tenant-token", "t0k"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert dict(line.split("=", 1) for line in lines) == builder.conf
    assert main(["spark", "jar"]) == 0
    assert capsys.readouterr().out.strip() == builder.conf["spark.jars"]


def test_conf_without_master_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark", "conf"]) == 2
    assert "--master" in capsys.readouterr().err
