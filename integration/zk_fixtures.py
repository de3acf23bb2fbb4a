"""Real ZooKeeper for integration tests: one standalone server per test session, one client per test.

The server comes from the system's ``zookeeper`` package (``.ci/run`` installs
it). Without it the fixtures FAIL, naming the package: a ZooKeeper test that
silently skips would hide a broken HA path.

Test modules load these fixtures with ``pytest_plugins`` (importing them by
name would trip ruff's F811 on every test that takes ``zk``; importing anything
else from this module first would stop pytest from rewriting its asserts).

Usage, in a test module::

    pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]
    pytest_plugins = ["integration.zk_fixtures"]   # zk_server, zk, zk_root, zk_connect, ...

    def test_something(zk: KazooClient, zk_root: str) -> None:
        zk.create(f"{zk_root}/x", b"", makepath=True)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from croupier.ha.zkserver import LocalZooKeeper, ZooKeeperNotInstalled

__all__ = [
    "SESSION_TIMEOUT",
    "connect",
    "start_zookeeper",
    "zk",
    "zk_connect",
    "zk_module_client",
    "zk_root",
    "zk_server",
]

SESSION_TIMEOUT = 4.0
"""Seconds; the servers here accept 0.4 to 8 s (tick 200 ms)."""


def start_zookeeper(base_dir: Path, nodes: int = 1) -> LocalZooKeeper:
    """Start ``nodes`` servers, or fail the test with the install command if ZooKeeper is missing."""
    try:
        return LocalZooKeeper(base_dir, nodes=nodes).start()
    except ZooKeeperNotInstalled as exc:
        pytest.fail(f"these tests need a real ZooKeeper: {exc}", pytrace=False)


def connect(hosts: str, timeout: float = SESSION_TIMEOUT) -> KazooClient:
    """A started ``KazooClient`` that keeps reconnecting (1 s apart at most); ``zk.retry`` gives
    up after 60 s. The caller stops and closes it."""
    client = KazooClient(
        hosts=hosts,
        timeout=timeout,
        connection_retry=KazooRetry(max_delay=1.0, max_tries=-1),
        # zk.retry(...) in tests: kazoo's default backoff grows towards an hour
        command_retry=KazooRetry(max_delay=1.0, max_tries=-1, deadline=60.0),
    )
    try:
        client.start(timeout=30)
    except BaseException:
        client.stop()
        client.close()
        raise
    return client


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    """One standalone ZooKeeper for the whole session (tests keep apart by root)."""
    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk(zk_server: LocalZooKeeper) -> Iterator[KazooClient]:
    """A connected client for one test; stopped and closed afterwards (no thread leaks)."""
    client = connect(zk_server.hosts)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def zk_module_client(zk_server: LocalZooKeeper) -> Iterator[KazooClient]:
    """One client for a whole module (for hypothesis tests, whose examples share fixtures)."""
    client = connect(zk_server.hosts)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_connect() -> Iterator[Callable[[str], KazooClient]]:
    """``zk_connect(hosts)`` connects another client; every one is stopped and closed afterwards."""
    clients: list[KazooClient] = []

    def make(hosts: str) -> KazooClient:
        client = connect(hosts)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def zk_root() -> str:
    """A root path no other test uses."""
    return f"/test-{uuid.uuid4().hex[:12]}"
