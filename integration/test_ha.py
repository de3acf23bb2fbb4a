"""The master ensemble on a real ZooKeeper: failover, fencing, replicated state, ZooKeeper down.

Every test starts its own ZooKeeper (Debian's package), three ``croupier master --ha``
processes and workers, through ``LocalCluster(ha=True, processes=True)``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core import commands as c
from croupier.core.commands import encode_command
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.core.errors import CroupierError, Unavailable
from croupier.services.local import LocalCluster
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]

DURABLE = ("workers", "apps", "shuffles", "term")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        2,
        tmp_path / "ha",
        processes=True,
        ha=True,
        session_timeout=2.0,
        master_config=MasterConfig(worker_timeout=20.0, takeover_grace=5.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5),
    ) as cl:
        yield cl


def call(url: str, command: c.Command, timeout: float = 5.0, signer: Signer | None = None) -> dict[str, Any]:
    with RpcClient(url, timeout=timeout, retries=0, signer=signer) as client:
        return client.call(*encode_command(command)).body


def roles(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    out = {}
    for url in cluster.master_urls():
        try:
            out[url] = call(url, c.Status(), timeout=2.0, signer=Signer.member(cluster.secret))
        except CroupierError:
            continue
    return out


def leader_of(cluster: LocalCluster) -> tuple[int, dict[str, Any]]:
    for _ in range(200):
        for i, url in enumerate(cluster.master_urls()):
            try:
                status = call(url, c.Status(), timeout=2.0, signer=Signer.member(cluster.secret))
            except CroupierError:
                continue
            if status["master"]["role"] == "leader":
                return i, status
        time.sleep(0.1)
    raise AssertionError("no leader")


def expected_records(m: int, partitions: int, n: int) -> list[tuple[int, bytes]]:
    return [(i % partitions, f"map{m}-rec{i}-".encode() * (1 + i % 7)) for i in range(n)]


def test_leader_crash_during_a_shuffle_loses_nothing(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    mappers, partitions, per_map = 6, 8, 3000
    config = ClientConfig(failover_deadline=60.0, rpc_timeout=10.0)
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("failover")
        sh = app.register_shuffle(num_mappers=mappers, num_partitions=partitions)
        errors: list[BaseException] = []

        def run_map(m: int) -> None:
            try:
                with croupier.connect(cluster.master_url, config=config) as own:
                    shuffle = own.open_shuffle(sh.handle())
                    with shuffle.writer(m, 0) as w:
                        for p, rec in expected_records(m, partitions, per_map):
                            w.write(p, rec)
            except BaseException as exc:
                errors.append(exc)

        first = [threading.Thread(target=run_map, args=(m,)) for m in range(3)]
        for t in first:
            t.start()
        for t in first:
            t.join()
        leader, before = leader_of(cluster)
        killed_at = time.monotonic()
        cluster.kill_master(leader)
        # the first request a new leader serves
        with MasterClient(cluster.master_url, timeout=2.0, deadline=60.0) as probe:
            probe.call(c.Ping())
        failover = time.monotonic() - killed_at
        rest = [threading.Thread(target=run_map, args=(m,)) for m in range(3, mappers)]
        for t in rest:
            t.start()
        for t in rest:
            t.join()
        assert not errors, errors
        for p in range(partitions):
            got = Counter(sh.reader(p))
            want = Counter(
                rec for m in range(mappers) for q, rec in expected_records(m, partitions, per_map) if q == p
            )
            assert got == want
        _, after = leader_of(cluster)
        assert after["term"] > before["term"]
        app.unregister()
    with capsys.disabled():
        print(
            f"\n[ha] kill -9 of the leader -> first request served by the new leader: {failover:.2f} s "
            f"(session timeout {cluster.session_timeout:.1f} s)"
        )


def test_every_follower_folds_to_the_leaders_state(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("replicated")
        sh = app.register_shuffle(num_mappers=2, num_partitions=5)
        for m in range(2):
            with sh.writer(m, 0) as w:
                w.write(m, b"x" * 100)
        list(sh.reader(0))
        app2 = client.register_app("second")
        app2.register_shuffle(num_mappers=1, num_partitions=3)
    _, leader = leader_of(cluster)
    for _ in range(100):
        states = roles(cluster)
        if len(states) == 3 and all(
            {k: s[k] for k in DURABLE} == {k: leader[k] for k in DURABLE} and s["seq"] == leader["seq"]
            for s in states.values()
        ):
            break
        time.sleep(0.1)
        _, leader = leader_of(cluster)
    else:
        raise AssertionError(f"followers differ from the leader: {json.dumps(states)[:2000]}")
    assert sorted(s["master"]["role"] for s in states.values()) == ["follower", "follower", "leader"]
    assert leader["master"]["followers"]


def test_a_deposed_leader_cannot_append(cluster: LocalCluster) -> None:
    leader, before = leader_of(cluster)
    old_url = cluster.master_urls()[leader]
    pid = cluster._master_procs[leader].popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # its session expires; another master takes over
        deadline = time.monotonic() + 30
        while True:
            others = [u for u in cluster.master_urls() if u != old_url]
            new = [u for u in others if _role(u) == "leader"]
            if new:
                break
            assert time.monotonic() < deadline, "no new leader while the old one was stopped"
            time.sleep(0.1)
        new_url = new[0]
        call(new_url, c.RegisterApp("after-takeover", "after-takeover"))
    finally:
        os.kill(pid, signal.SIGCONT)
    # the old leader wakes up believing it leads for a moment: a write it takes must not land
    try:
        call(old_url, c.RegisterApp("stale-write", "stale-write"), timeout=10.0)
        landed_reply = True
    except CroupierError:
        landed_reply = False
    time.sleep(1.0)
    status = call(new_url, c.Status(), signer=Signer.member(cluster.secret))
    apps = {a["app_id"] for a in status["apps"]}
    assert "after-takeover" in apps
    assert "stale-write" not in apps or not landed_reply or _role(old_url) != "leader"
    # and the deposed master now follows
    deadline = time.monotonic() + 30
    while _role(old_url) != "follower":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert status["term"] > before["term"]
    # the log has one writer per term: terms only grow
    terms = _logged_terms(cluster)
    assert terms == sorted(set(terms))


def _role(url: str) -> str:
    try:
        return str(call(url, c.Status(), timeout=1.0)["master"]["role"])
    except CroupierError:
        return "down"


def _logged_terms(cluster: LocalCluster) -> list[int]:
    from kazoo.client import KazooClient

    from croupier.core.events import LeaderChanged, decode_event
    from croupier.ha.zklog import ZooKeeperEventLog

    zk = KazooClient(hosts=cluster.zookeeper.hosts)
    zk.start(timeout=10)
    try:
        view = ZooKeeperEventLog(zk, "/croupier", writer=False)
        try:
            return [e.term for _, r in view.read() if isinstance(e := decode_event(r), LeaderChanged)]
        finally:
            view.close()
    finally:
        zk.stop()
        zk.close()


def test_zookeeper_down_refuses_writes_clearly_and_keeps_serving_reads(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("zk-down")
        sh = app.register_shuffle(num_mappers=1, num_partitions=4)
        with sh.writer(0, 0) as w:
            for i in range(200):
                w.write(i % 4, f"r{i}".encode())
        before = sorted(sh.reader(2))
        leader, _ = leader_of(cluster)
        url = cluster.master_urls()[leader]
        assert cluster.zookeeper is not None
        cluster.zookeeper.stop_node(0)
        try:
            time.sleep(1.0)
            with pytest.raises(Unavailable) as info:
                call(url, c.RegisterApp("while-down", "while-down"))
            assert info.value.retriable
            loc = call(url, c.GetLocations(sh.app_id, sh.shuffle_id, 2), signer=Signer.member(cluster.secret))
            assert loc["committed"] is True
        finally:
            cluster.zookeeper.start_node(0)
        # service resumes (possibly with a new leader)
        with MasterClient(cluster.master_url, timeout=5.0, deadline=60.0) as master:
            master.call(c.RegisterApp("after-zk", "after-zk"))
        assert sorted(sh.reader(2)) == before
        app.unregister()
