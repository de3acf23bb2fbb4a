"""Splits under the real (in-process) LocalCluster: a skewed partition splits soft over
several epochs and reads back exactly once; a worker decommissioned under a writer answers
``HARD_SPLIT``, its partitions move, nothing is lost, and it drains when its shuffle is
unregistered."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.commands import DecommissionWorker, GetLocations
from croupier.core.config import ClientConfig, WorkerConfig
from croupier.core.replies import DecommissionReply, LocationsReply
from tests.sdk.conftest import HAVE_LOCAL

pytestmark = pytest.mark.skipif(not HAVE_LOCAL, reason="croupier.services.local is not there yet")

THRESHOLD = 32 * 1024
HOT, PARTITIONS, MAPS = 3, 8, 4


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Any]:
    from croupier.services.local import LocalCluster  # type: ignore[import-not-found,unused-ignore]

    worker = WorkerConfig(heartbeat_interval=0.2, split_threshold=THRESHOLD)
    with LocalCluster(workers=3, base_dir=tmp_path, worker_config=worker) as cluster:
        yield cluster


def epochs(client: croupier.Client, app_id: str, shuffle_id: int, partition: int) -> list[int]:
    reply = client._master.request(GetLocations(app_id, shuffle_id, partition), LocationsReply)
    return [loc.epoch for loc in reply.locations]


def record(m: int, p: int, i: int) -> bytes:
    return b"m%d-p%d-i%d-" % (m, p, i) + b"x" * 80


def test_a_skewed_partition_splits_soft_and_reads_back_exactly_once(local: Any, config: ClientConfig) -> None:
    with croupier.connect(local.master_url, config=config) as client:
        app = client.register_app("skew")
        sh = app.register_shuffle(num_mappers=MAPS, num_partitions=PARTITIONS)
        written: dict[int, Counter[bytes]] = {p: Counter() for p in range(PARTITIONS)}
        soft = 0
        for m in range(MAPS):
            with sh.writer(m) as w:
                for p in range(PARTITIONS):
                    for i in range(1000 if p == HOT else 50):  # the hot partition: 20x the others
                        w.write(p, record(m, p, i))
                        written[p][record(m, p, i)] += 1
            soft += w.stats["soft_splits"]
        hot = epochs(client, app.app_id, sh.shuffle_id, HOT)
        # ~400 KiB in 32 KiB locations: many epochs (a location takes data until its revive returns)
        assert soft >= 3 and len(hot) >= 4 and hot == list(range(len(hot)))
        assert all(epochs(client, app.app_id, sh.shuffle_id, p) == [0] for p in range(PARTITIONS) if p != HOT)
        for p in range(PARTITIONS):
            assert Counter(sh.reader(p)) == written[p], p
        app.unregister()


def test_a_decommissioned_worker_splits_hard_loses_nothing_and_drains(
    local: Any, config: ClientConfig
) -> None:
    with croupier.connect(local.master_url, config=config) as client:
        app = client.register_app("leave")
        sh = app.register_shuffle(num_mappers=1, num_partitions=6)
        victim = local.workers[0]
        written: Counter[bytes] = Counter()
        with sh.writer(0) as w:
            for i in range(300):
                w.write(i % 6, b"before-%d" % i)
                written[b"before-%d" % i] += 1
            w._sender.drain()  # every location exists on its workers
            reply = client._master.request(DecommissionWorker(victim.worker_id), DecommissionReply)
            assert reply.status == "decommissioning"
            wait(lambda: victim.split.decommissioning)
            for i in range(300):
                w.write(i % 6, b"after-%d" % i)
                written[b"after-%d" % i] += 1
        assert w.stats["revived"] >= 1
        got: Counter[bytes] = Counter()
        for p in range(6):
            got.update(sh.reader(p))
        assert got == written
        assert not victim.drained.is_set()  # the shuffle, still registered, holds slots on it
        app.unregister()
        wait(victim.drained.is_set)
        rows = {r["worker_id"]: r["status"] for r in client.status()["workers"]}
        assert rows[victim.worker_id] == "drained"


def wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
