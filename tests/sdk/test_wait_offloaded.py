"""``Shuffle.wait_offloaded`` (issue 26) in-process, with the in-memory object store: a partition
no map wrote to, or an epoch nothing was pushed to, has no copy anywhere, and is not waited for
(both waited until the timeout)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import croupier
from croupier.core.commands import RevivePartition
from croupier.core.config import WorkerConfig
from croupier.core.replies import LocationsReply
from croupier.services.local import LocalCluster


def test_a_partition_nobody_wrote_to_is_not_waited_for(tmp_path: Path) -> None:
    url = f"memory://{uuid.uuid4().hex}/p"
    config = WorkerConfig(object_store=url, memory_tier_max=0)
    with LocalCluster(2, tmp_path, worker_config=config) as cl, croupier.connect(cl.master_url) as client:
        client.object_store = url
        sh = client.register_app("empty-partition").register_shuffle(num_mappers=1, num_partitions=3)
        with sh.writer(0, 0) as w:
            w.write(0, b"x" * 100)
            w.write(2, b"y")
        assert list(sh.reader(1)) == []
        sh.wait_offloaded(20)  # partitions 0 and 2 are in the store; 1 has nothing to offload
        assert list(sh.reader(0)) == [b"x" * 100]


def test_an_epoch_nobody_pushed_to_is_not_waited_for(tmp_path: Path) -> None:
    """A split's new epoch placed after the writer's last push has no copy anywhere: its workers
    answer OPEN_STREAM with UNKNOWN_SHUFFLE, and it is not waited for (it waited forever)."""
    url = f"memory://{uuid.uuid4().hex}/p"
    config = WorkerConfig(object_store=url, memory_tier_max=0)
    with LocalCluster(2, tmp_path, worker_config=config) as cl, croupier.connect(cl.master_url) as client:
        client.object_store = url
        sh = client.register_app("empty-epoch").register_shuffle(num_mappers=2, num_partitions=2)
        with sh.writer(0, 0) as w:
            w.write(0, b"a")
            w.write(1, b"b")
        revive = RevivePartition(sh.app_id, sh.shuffle_id, 0, 0, "split")
        assert sh.master.request(revive, LocationsReply).locations[-1].epoch == 1
        with sh.writer(1, 0) as w:  # the last map: the commit
            w.write(1, b"c")
        sh.wait_offloaded(20)
        assert list(sh.reader(0)) == [b"a"] and sorted(sh.reader(1)) == [b"b", b"c"]
        # nor is it pending in the master's view (it was, for ever): the commit listed its
        # copies as empty
        offload = _settled(cl)
        assert offload["pending_copies"] == 0 and offload["committed_copies"] == offload["offloaded_copies"]


def _settled(cl: LocalCluster) -> dict[str, Any]:
    """The master's offload view once the workers' reports stop changing it."""
    offload: dict[str, Any] = cl.status()["offload"]
    for _ in range(100):
        if offload["pending_copies"] == 0:
            break
        time.sleep(0.1)
        offload = cl.status()["offload"]
    return offload
