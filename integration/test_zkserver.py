"""LocalZooKeeper: real ZooKeeper processes, standalone and a 3-node ensemble losing and regaining quorum."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from croupier.ha import zkserver
from croupier.ha.zkserver import LocalZooKeeper, ZooKeeperNotInstalled, four_letter_word

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]
pytest_plugins = ["integration.zk_fixtures"]  # zk_server, zk, zk_root, zk_connect, zk_module_client


def test_standalone_server(zk_server: LocalZooKeeper, zk: KazooClient, zk_root: str) -> None:
    assert zk_server.mode(0) == "standalone"
    host, port = zk_server.hosts.split(":")
    assert host == "127.0.0.1"
    assert four_letter_word(host, int(port), "ruok") == "imok"
    assert zk_server.url("/croupier") == f"zk://{zk_server.hosts}/croupier"
    with pytest.raises(ValueError, match="root"):
        zk_server.url("croupier")
    zk.create(f"{zk_root}/x", b"hello", makepath=True)
    assert zk.get(f"{zk_root}/x")[0] == b"hello"
    # sessions may be as short as 2 ticks, for fast failover tests
    config = (zk_server.nodes[0].directory / "zoo.cfg").read_text()
    assert "minSessionTimeout=400" in config and "4lw.commands.whitelist=*" in config


def test_a_missing_install_fails_with_the_package_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zkserver, "JAVA_DIR", str(tmp_path / "no-java-here"))
    server = LocalZooKeeper(tmp_path / "zk")
    with pytest.raises(ZooKeeperNotInstalled, match="apt-get install -y zookeeper"):
        server.start()
    server.stop()  # idempotent, and nothing was started


def _write(zk: KazooClient, path: str) -> None:
    zk.retry(zk.create, path, b"x", makepath=True)


def test_ensemble_survives_one_node_and_regains_quorum(
    tmp_path: Path, zk_connect: Callable[[str], KazooClient]
) -> None:
    with LocalZooKeeper(tmp_path, nodes=3).start() as ensemble:
        modes = sorted(ensemble.mode(i) or "-" for i in range(3))
        assert modes == ["follower", "follower", "leader"]
        zk = zk_connect(ensemble.hosts)
        _write(zk, "/ha/a")

        # One node down (the leader, for the harder case): the other two elect a new one.
        leader = next(i for i in range(3) if ensemble.mode(i) == "leader")
        ensemble.stop_node(leader)
        ensemble.wait_serving(timeout=30)
        _write(zk, "/ha/b")
        assert sorted(zk.get_children("/ha")) == ["a", "b"]

        # Two down: no quorum, so a write cannot succeed.
        survivor, other = (i for i in range(3) if i != leader)
        ensemble.kill_node(other)
        with pytest.raises((ConnectionLoss, SessionExpiredError, KazooTimeoutError)):
            zk.create_async("/ha/c", b"x").get(timeout=3)
        assert ensemble.mode(survivor) is None, "a node without a quorum does not serve"

        # Both back (the first one cannot serve alone, so do not wait for it): writes work again.
        ensemble.start_node(leader, wait=False)
        ensemble.start_node(other)
        ensemble.wait_serving(timeout=30)
        _write(zk, "/ha/d")
        assert {"a", "b", "d"} <= set(zk.retry(zk.get_children, "/ha"))
    assert all(not node.running() for node in ensemble.nodes)
    ensemble.stop()  # idempotent
