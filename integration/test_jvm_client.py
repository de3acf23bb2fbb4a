"""The JVM client (``clients/jvm``) against real master and worker processes, security on.

Each test drives the Java test main ``io.croupier.test.JvmCli`` (a fresh JVM per command); the
Python SDK is the other side of the cross-language tests. Skipped when there is no JDK or no
pyspark (whose jars the client compiles against).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from tests.jvm.harness import build_test_classpath, run_java, spark_jars_or_skip

pytestmark = pytest.mark.integration

CLI = "io.croupier.test.JvmCli"
FAST = ClientConfig(rpc_timeout=5.0, fetch_timeout=3.0)


@pytest.fixture(scope="module")
def java_cp() -> str:
    return build_test_classpath(spark_jars_or_skip())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        3,
        tmp_path / "cluster",
        processes=True,
        master_config=MasterConfig(worker_timeout=3.0, takeover_grace=1.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5),
    ) as cl:
        yield cl


def java(cp: str, *args: str, check: bool = True) -> list[str]:
    return run_java(cp, CLI, *args, check=check).stdout.splitlines()


def read_records(lines: list[str]) -> list[tuple[int, int, bytes]]:
    out = []
    for line in lines:
        if line.startswith("record "):
            _, p, m, data = line.split(" ")
            out.append((int(p), int(m), base64.b64decode(data)))
    return out


def test_the_java_client_writes_and_reads_its_own_shuffle(java_cp: str, cluster: LocalCluster) -> None:
    out = java(java_cp, "e2e", cluster.master_url)
    assert out[-1].startswith("ok 150 records"), out


def test_java_writes_and_python_reads_every_record_once(java_cp: str, cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("jvm-to-py")
        sh = app.register_shuffle(num_mappers=3, num_partitions=5)
        for m in range(3):
            assert java(java_cp, "write", cluster.master_url, sh.handle(), str(m), "0", "400") == ["won=true"]
        got = sorted(r for p in range(5) for r in sh.reader(p))
        assert got == sorted(f"j-{m}-{i}".encode() for m in range(3) for i in range(400))
        app.unregister()


def test_python_writes_and_java_reads_every_record_once_and_a_map_range(
    java_cp: str, cluster: LocalCluster
) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("py-to-jvm")
        sh = app.register_shuffle(num_mappers=4, num_partitions=6)
        want: list[tuple[int, int, bytes]] = []
        for m in range(4):
            with sh.writer(m) as w:
                for i in range(300):
                    record = f"py-{m}-{i}".encode() * (1 + i % 7)
                    w.write(i % 6, record)
                    want.append((i % 6, m, record))
        everything = ("0", "2147483647", "0", "6")
        got = read_records(java(java_cp, "read", cluster.master_url, sh.handle(), *everything))
        assert sorted(got) == sorted(want)
        # an AQE skew split: maps [1, 3) of partitions [2, 4)
        part = read_records(java(java_cp, "read", cluster.master_url, sh.handle(), "1", "3", "2", "4"))
        assert sorted(part) == sorted(x for x in want if 1 <= x[1] < 3 and 2 <= x[0] < 4)
        app.unregister()
