"""A whole cluster with ``--curve``: master, workers (all four ports, replication), SDK, CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zmq

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import RequestTimeout
from croupier.services.cli import main
from croupier.services.local import LocalCluster
from croupier.transports.curve import CURVE_KEY_ENV, CurveServer
from croupier.transports.secret import create_secret_file, load_secret_file

_QUICK = ClientConfig(rpc_timeout=1.0, rpc_retries=0, failover_deadline=0.0, app_heartbeat_interval=0)


def _records(partition: int, n: int) -> list[bytes]:
    return [f"p{partition}-r{i}-".encode() * (1 + i % 7) for i in range(n)]


def test_a_shuffle_through_a_curve_cluster_reads_back_exactly(tmp_path: Path) -> None:
    with LocalCluster(2, tmp_path, curve=True) as cluster:
        assert cluster.curve is not None
        assert cluster.curve == CurveServer.from_secret(load_secret_file(tmp_path / "secret"))
        for worker in cluster.workers:
            for server in worker._servers.values():
                assert server._sock is not None and server._sock.getsockopt(zmq.CURVE_SERVER) == 1
        with croupier.connect(cluster.master_url, curve_server_key=cluster.curve_server_key) as client:
            app = client.register_app("curve")
            sh = app.register_shuffle(num_mappers=2, num_partitions=4, replicate=True)
            for m in range(2):
                with sh.writer(m) as w:
                    for p in range(4):
                        for record in _records(p, 50)[m::2]:
                            w.write(p, record)
            for p in range(4):
                assert sorted(sh.reader(p)) == sorted(_records(p, 50))
            app.unregister()


def test_a_client_without_the_key_times_out_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CURVE_KEY_ENV, raising=False)
    with LocalCluster(1, tmp_path, curve=True) as cluster:
        with (
            croupier.connect(cluster.master_url, config=_QUICK) as client,
            pytest.raises(RequestTimeout, match="may require CURVE"),
        ):
            client.register_app("no-key")
        # the key from the environment is enough
        monkeypatch.setenv(CURVE_KEY_ENV, cluster.curve_server_key)
        with croupier.connect(cluster.master_url) as client:
            assert client.status()["workers"]


def test_secret_public_prints_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "secret"
    secret = create_secret_file(path)
    assert main(["secret-public", str(path)]) == 0
    assert capsys.readouterr().out.strip() == CurveServer.from_secret(secret).public.decode()


def test_curve_without_a_secret_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CROUPIER_SECRET_FILE", raising=False)
    assert main(["worker", "--master", "tcp://127.0.0.1:1", "--dirs", str(tmp_path), "--curve"]) == 2
    assert "no cluster secret" in capsys.readouterr().err
    assert main(["admin", "--master", "tcp://127.0.0.1:1", "--curve", "status"]) == 2


def test_admin_talks_curve_with_the_secret_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(1, tmp_path, curve=True) as cluster:
        secret = str(cluster.secret_file)
        assert oct(os.stat(secret).st_mode & 0o777) == "0o600"
        args = ["admin", "--master", cluster.master_url, "--timeout", "5s", "--json"]
        assert main([*args, "--curve", "--secret-file", secret, "workers"]) == 0
        assert cluster.worker_ids()[0] in capsys.readouterr().out
        assert main([*args, "--timeout", "0.5s", "--secret-file", secret, "workers"]) == 1
        assert "may require CURVE" in capsys.readouterr().err
