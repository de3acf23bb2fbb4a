"""Issue 14 item 4: tenants and quotas, through real processes (``croupier master --tenants``).

Each quota is refused with ``QUOTA_EXCEEDED`` naming the quota, the limit and the usage,
as the SDK (``QuotaExceeded.details``) and the CLI (``croupier demo``, ``croupier admin
tenants``) see it; tokens are needed with a tenants file, a wrong one is refused; an app's
tenant survives a master restart (the event log), and the token is never in the log.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.commands import Status
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from croupier.transports.master_client import MasterClient
from integration.procs import CLI, Proc, admin, member_signer, wait_until

pytestmark = pytest.mark.integration

TOKEN = "etl-token-0123456789"
TENANTS = f"""
[default]
max_shuffles = 10

[tenants.etl]
token = "{TOKEN}"
max_partitions = 100
max_bytes_in_flight = "4kB"
max_bytes_stored = 1000

[tenants.small]
token = "small-token-0123456789"
max_shuffles = 0
"""


@pytest.fixture
def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS)
    return path


def _master(tmp_path: Path, tenants_file: Path) -> Proc:
    args = ["master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    return Proc([*args, "--tenants", str(tenants_file)], tmp_path / "master.log")


def _tenants(url: str, secret_file: Path) -> dict[str, dict[str, Any]]:
    return {row["tenant"]: row for row in admin(url, "tenants", secret_file=secret_file)}


def test_tokens_are_needed_and_the_tenant_survives_a_restart(tmp_path: Path, tenants_file: Path) -> None:
    master = _master(tmp_path, tenants_file)
    try:
        with croupier.connect(master.url) as client, pytest.raises(croupier.Unauthorized, match="token"):
            client.register_app("job")
        with (
            croupier.connect(master.url, tenant_token="etl-token-wrong-0000") as client,
            pytest.raises(croupier.Unauthorized, match="not one of"),
        ):
            client.register_app("job")
        with croupier.connect(master.url, tenant_token=TOKEN) as client:
            app = client.register_app("job")
            # the partitions quota is checked before placement: no workers are needed to see it
            with pytest.raises(croupier.QuotaExceeded) as err:
                app.register_shuffle(num_mappers=1, num_partitions=101)
            assert err.value.details == {"tenant": "etl", "quota": "partitions", "limit": 100, "usage": 0}
            assert "the limit is 100, the usage is 0 and this shuffle adds 101" in err.value.message
            app.close()  # no unregister: the app stays registered across the restart
    finally:
        assert master.stop() == 0
    master = _master(tmp_path, tenants_file)
    secret_file = tmp_path / "data" / "secret"  # the master made it
    try:
        rows = _tenants(master.url, secret_file)
        assert rows["etl"]["apps"] == 1 and rows["small"]["apps"] == 0
        assert (rows["etl"]["max_partitions"], rows["small"]["max_shuffles"]) == (100, 0)
        with MasterClient(master.url, signer=member_signer(secret_file)) as mc:
            assert [a["name"] for a in mc.call(Status())["apps"]] == ["job"]
    finally:
        master.stop()
    assert TOKEN not in master.log()
    for segment in (tmp_path / "data").iterdir():
        assert TOKEN.encode() not in segment.read_bytes()


def test_bytes_quotas_follow_the_workers_reports_and_the_commit(tmp_path: Path, tenants_file: Path) -> None:
    with (
        LocalCluster(
            2,
            tmp_path / "cluster",
            processes=True,
            master_config=MasterConfig(takeover_grace=1.0),
            worker_config=WorkerConfig(heartbeat_interval=0.2),
            master_args=["--tenants", str(tenants_file)],
        ) as cluster,
        croupier.connect(
            cluster.master_url, tenant_token=TOKEN, config=ClientConfig(push_buffer_size=1024)
        ) as client,
    ):
        secret_file = cluster.secret_file
        app = client.register_app("job")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        writer = sh.writer(0)
        for i in range(40):
            writer.write(i % 2, bytes(1000))  # the writer keeps some in its buffers
        # the pushes are acked; the workers report them with their next heartbeat
        wait_until(lambda: _tenants(cluster.master_url, secret_file)["etl"]["bytes_in_flight"] >= 4000)
        with pytest.raises(croupier.QuotaExceeded) as err:
            app.register_shuffle(num_mappers=1, num_partitions=2)
        details = err.value.details
        assert (details["quota"], details["limit"]) == ("bytes_in_flight", 4000) and details["usage"] >= 4000
        writer.close()  # every map ended: the shuffle commits, its bytes are stored, not in flight
        wait_until(lambda: _tenants(cluster.master_url, secret_file)["etl"]["bytes_stored"] > 1000)
        assert _tenants(cluster.master_url, secret_file)["etl"]["bytes_in_flight"] == 0
        with pytest.raises(croupier.QuotaExceeded) as err:
            app.register_shuffle(num_mappers=1, num_partitions=2)
        assert err.value.details["quota"] == "bytes_stored"
        text = subprocess.run(
            [*CLI, "admin", "--master", cluster.master_url, "--secret-file", str(secret_file), "tenants"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "etl" in text and "1/10" in text and "2/100" in text and "/1000" in text
        app.unregister()
        wait_until(lambda: _tenants(cluster.master_url, secret_file)["etl"]["shuffles"] == 0)


def test_cli_demo_prints_the_quota_and_exits_non_zero(tmp_path: Path, tenants_file: Path) -> None:
    args = ["demo", "--workers", "2", "--mappers", "1", "--partitions", "200", "--size", "64kB"]
    out = subprocess.run(
        [*CLI, *args, "--tenants", str(tenants_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "CROUPIER_TENANT_TOKEN": TOKEN},
    )
    assert out.returncode == 1, out.stderr
    assert "croupier demo: QUOTA_EXCEEDED: tenant 'etl' is over its partitions quota" in out.stderr
    assert "the limit is 100, the usage is 0" in out.stderr


def test_a_bad_tenants_file_stops_the_master(tmp_path: Path) -> None:
    bad = tmp_path / "tenants.toml"
    bad.write_text('[tenants.etl]\ntoken = "short"\n')
    args = [
        *CLI,
        "master",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "d"),
        "--tenants",
        str(bad),
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert (out.returncode, out.stdout) == (2, "")
    assert "[tenants.etl]: token must be" in out.stderr
