"""Issue 13: an HA master whose log cannot be replayed exits non-zero with ``LogCorrupted``
before it prints its URL, as the embedded master does (``test_master_startup.py``).

It used to fold the log as a follower, defer every failed fold (logged at debug level),
print its URL and serve STATUS from an empty state, as if the ensemble had nothing in it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from croupier.ha.zklog import ZooKeeperEventLog
from croupier.ha.zkserver import LocalZooKeeper
from croupier.transports.secret import create_secret_file
from integration.procs import CLI

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]
pytest_plugins = ["integration.zk_fixtures"]


@pytest.mark.parametrize(
    "event",
    [{"e": "NoSuchKind", "v": 1}, {"e": "AppUnregistered", "v": 1, "app_id": "never-registered"}],
    ids=["unknown kind", "rejected by the fold"],
)
def test_an_unreplayable_log_stops_the_ha_master_before_its_url(
    zk_server: LocalZooKeeper,
    zk: KazooClient,
    zk_root: str,
    event: dict[str, object],
    tmp_path: Path,
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    try:
        log.append([json.dumps(event).encode()])
    finally:
        log.close()
    # an HA master is given the ensemble's secret (it never makes one): the log is what fails here
    secret_file = tmp_path / "secret"
    create_secret_file(secret_file)
    args = [
        *CLI,
        "master",
        "--listen",
        "127.0.0.1:0",
        "--ha",
        f"zk://{zk_server.hosts}{zk_root}",
        "--secret-file",
        str(secret_file),
    ]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the HA master did not exit; it printed {out!r}")
    assert (proc.returncode, out) == (1, "")
    assert "croupier master: INTERNAL (LogCorrupted): event log corrupted: record 1" in err
