"""The HTTP endpoint of an HA ensemble (two in-process members on a real ZooKeeper): the
leader serves /api/v1, the follower redirects there (307) through the members' ``<root>/http``
znodes, and each member's /metrics tells its role."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from croupier.core.config import MasterConfig
from croupier.ha.zkserver import LocalZooKeeper
from croupier.services.ha_master import HaMasterService

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
                HaMasterService(
                    "tcp://127.0.0.1:0", url, config=config, session_timeout=2.0, http="127.0.0.1:0"
                ).start()
            )
        yield started
    finally:
        for member in started:
            member.stop()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return got


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_the_follower_redirects_to_the_leaders_http_endpoint(members: list[HaMasterService]) -> None:
    leader = wait_for("a leader", lambda: next((m for m in members if m.role == "leader"), None))
    follower = next(m for m in members if m is not leader)
    assert leader.http is not None and follower.http is not None
    wait_for("the follower to know the leader", lambda: follower.leader_url == leader.url)
    with urllib.request.urlopen(leader.http.url + "/api/v1/cluster", timeout=10) as resp:
        cluster = json.loads(resp.read())
    assert cluster["role"] == "leader" and cluster["term"] == leader.term
    assert cluster["http"] == leader.http.url
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as info:
        opener.open(follower.http.url + "/api/v1/workers", timeout=10)
    assert info.value.code == 307
    assert info.value.headers["Location"] == leader.http.url + "/api/v1/workers"
    info.value.close()
    with urllib.request.urlopen(follower.http.url + "/api/v1/cluster", timeout=10) as resp:  # followed
        assert json.loads(resp.read())["role"] == "leader"
    with urllib.request.urlopen(follower.http.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'croupier_master_role{role="follower"} 1.0' in text
    with urllib.request.urlopen(leader.http.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'croupier_master_role{role="leader"} 1.0' in text
    # the leader's appends to ZooKeeper (its TakeOver at least) are counted and timed
    assert metric(text, "croupier_master_events_appended_total") >= 1
    assert metric(text, "croupier_master_append_seconds_count") >= 1
    assert metric(text, "croupier_master_append_seconds_sum") > 0


def metric(text: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == name]
    assert len(values) == 1, f"{name}: {values}"
    return values[0]
