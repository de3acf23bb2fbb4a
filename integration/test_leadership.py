"""The leadership recipe in-process on a real ZooKeeper: two ``HaMasterService`` members.

Checks the ZooKeeper side of DESIGN §5 that the process-level tests in
``test_ha.py`` only see from outside: the ``/leader`` record's bytes, its
withdrawal on step-down, the follower's answers, and a fenced leader stepping
down when another writer bumps ``/epoch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from croupier.core import commands as c
from croupier.core.commands import encode_command
from croupier.core.config import MasterConfig
from croupier.core.errors import CroupierError, NotLeader
from croupier.core.leader_record import decode_leader, encode_leader
from croupier.ha.zkserver import LocalZooKeeper
from croupier.services.ha_master import HaMasterService
from croupier.transports.rpc import RpcClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]
pytest_plugins = ["integration.zk_fixtures"]  # zk_server, zk, zk_root


@pytest.fixture
def members(zk_server: LocalZooKeeper, zk_root: str) -> Iterator[list[HaMasterService]]:
    config = MasterConfig(sweep_interval=0, takeover_grace=0)
    started: list[HaMasterService] = []
    try:
        for _ in range(2):
            url = f"zk://{zk_server.hosts}{zk_root}"
            started.append(
                HaMasterService("tcp://127.0.0.1:0", url, config=config, session_timeout=2.0).start()
            )
        yield started
    finally:
        for member in started:
            member.stop()


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def call(url: str, command: c.Command) -> dict[str, Any]:
    with RpcClient(url, timeout=5.0, retries=0) as client:
        return client.call(*encode_command(command)).body


def leader_of(members: list[HaMasterService]) -> HaMasterService:
    wait_for("a leader", lambda: any(m.role == "leader" for m in members))
    return next(m for m in members if m.role == "leader")


def test_the_leader_publishes_its_record_and_the_follower_points_to_it(
    members: list[HaMasterService], zk: KazooClient, zk_root: str
) -> None:
    leader = leader_of(members)
    follower = next(m for m in members if m is not leader)
    data, _ = zk.get(f"{zk_root}/leader")
    assert data == encode_leader(leader.url, leader.term)
    wait_for("the follower to read the leader", lambda: follower.leader_url == leader.url)
    status = call(follower.url, c.Status())
    assert status["master"]["role"] == "follower"
    assert status["master"]["leader"] == leader.url
    with pytest.raises(NotLeader) as info:
        call(follower.url, c.RegisterApp("job"))
    assert info.value.leader == leader.url


def test_a_leader_that_stops_withdraws_its_record_and_the_follower_takes_over(
    members: list[HaMasterService], zk: KazooClient, zk_root: str
) -> None:
    leader = leader_of(members)
    term = leader.term
    leader.stop()
    follower = next(m for m in members if m is not leader)
    wait_for("the follower to take over", lambda: follower.role == "leader")
    assert follower.term > term
    record = decode_leader(zk.get(f"{zk_root}/leader")[0])
    assert (record.url, record.term) == (follower.url, follower.term)


def test_a_bumped_epoch_fences_the_leader_which_steps_down(
    members: list[HaMasterService], zk: KazooClient, zk_root: str
) -> None:
    leader = leader_of(members)
    term = leader.term
    # another writer takes the term: the leader's next append fails its fence
    zk.set(f"{zk_root}/epoch", b"fenced")
    with pytest.raises(CroupierError):
        call(leader.url, c.RegisterApp("stale"))
    wait_for("a new term", lambda: any(m.role == "leader" and m.term > term + 1 for m in members))
    apps = call(leader_of(members).url, c.Status())["apps"]
    assert "stale" not in {a["app_id"] for a in apps}


def test_the_leader_does_not_list_the_log_after_each_append_and_the_follower_does(
    members: list[HaMasterService], zk_root: str
) -> None:
    # issue 27: the log watch lists every batch znode at each change; a leader wrote them
    leader = leader_of(members)
    follower = next(m for m in members if m is not leader)
    listed: dict[str, int] = {leader.url: 0, follower.url: 0}
    for member in members:
        client = member._zk
        assert client is not None
        plain = client.get_children

        def counted(
            path: str, *args: object, _plain: object = plain, _url: str = member.url, **kw: object
        ) -> object:
            if path == f"{zk_root}/log":
                listed[_url] += 1
            return _plain(path, *args, **kw)  # type: ignore[operator]

        client.get_children = counted
    for i in range(20):
        call(leader.url, c.RegisterApp(f"job{i}"))
    seq = call(leader.url, c.Status())["master"]["seq"]
    wait_for("the follower to fold", lambda: call(follower.url, c.Status())["master"]["seq"] == seq)
    assert listed[leader.url] <= 1  # the change that dropped its watch (20 before)
    assert listed[follower.url] >= 1
