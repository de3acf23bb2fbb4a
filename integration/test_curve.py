"""``--curve`` across real processes: ``croupier master|worker --curve --secret-file`` children,
a verified demo shuffle through them, and a client without the key refused with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import RequestTimeout
from croupier.services.local import LocalCluster
from croupier.tools.demo import run_demo

pytestmark = pytest.mark.integration


def test_a_curve_cluster_of_processes_serves_only_curve_clients(tmp_path: Path) -> None:
    with LocalCluster(2, tmp_path, processes=True, curve=True) as cluster:
        quick = ClientConfig(rpc_timeout=1.0, rpc_retries=0, failover_deadline=0.0)
        with (
            croupier.connect(cluster.master_url, config=quick, curve_server_key="") as client,
            pytest.raises(RequestTimeout, match="may require CURVE"),
        ):
            client.status()
        with croupier.connect(cluster.master_url, curve_server_key=cluster.curve_server_key) as client:
            app = client.register_app("curve-procs")
            sh = app.register_shuffle(num_mappers=1, num_partitions=3)
            with sh.writer(0) as w:
                for i in range(300):
                    w.write(i % 3, b"secret-%d" % i)
            assert sorted(r for p in range(3) for r in sh.reader(p)) == sorted(
                b"secret-%d" % i for i in range(300)
            )
            app.unregister()
        logs = sorted(tmp_path.glob("*.log"))
        assert len(logs) == 3 and all("CURVE" in log.read_text() for log in logs)


def test_the_demo_verifies_with_curve() -> None:
    result = run_demo(4 * 1024**2, 2, 8, 2, progress=False, curve=True)
    assert result.verified, result.errors


@pytest.mark.zookeeper
def test_an_ha_ensemble_with_curve_fails_over_and_reads_back(tmp_path: Path) -> None:
    with LocalCluster(
        2, tmp_path, processes=True, ha=True, masters=2, curve=True, session_timeout=2.0
    ) as cluster:
        key = cluster.curve_server_key
        with croupier.connect(cluster.master_url, curve_server_key=key) as client:
            app = client.register_app("curve-ha")
            sh = app.register_shuffle(num_mappers=1, num_partitions=2)
            with sh.writer(0) as w:
                for i in range(100):
                    w.write(i % 2, b"ha-%d" % i)
            leader = next(
                i for i, url in enumerate(cluster.master_urls()) if url in str(client.status()["master"])
            )
            cluster.kill_master(leader)
            assert sorted(r for p in range(2) for r in sh.reader(p)) == sorted(
                b"ha-%d" % i for i in range(100)
            )
            app.unregister()
