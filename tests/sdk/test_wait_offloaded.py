"""``Shuffle.wait_offloaded`` (issue 26) in-process, with the in-memory object store: a partition
no map wrote to has no copy anywhere, and is not waited for (it waited forever)."""

from __future__ import annotations

import uuid
from pathlib import Path

import croupier
from croupier.core.config import WorkerConfig
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
