"""FETCH_CHUNK replies sent from pooled read buffers as zero-copy frames (issue 25): the bytes
read arrive whole, and every buffer is free again once its reply has left."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, WorkerConfig
from croupier.services.local import LocalCluster
from croupier.storage import _direct
from croupier.storage.disk import DiskPartitionStore

CONFIG = ClientConfig(rpc_timeout=5.0, commit_wait_timeout=30.0, fetch_timeout=10.0)


def test_chunks_are_sent_from_pooled_buffers_that_come_back(tmp_path: Path) -> None:
    config = WorkerConfig(heartbeat_interval=1.0, memory_tier_fraction=0.0, chunk_size=512 * 1024)
    pool = _direct.LEND_POOL
    lent = pool.lent
    with (
        LocalCluster(workers=1, base_dir=tmp_path, worker_config=config) as lc,
        croupier.connect(lc.master_url, config=CONFIG) as client,
    ):
        store = lc.workers[0].store
        if not (isinstance(store, DiskPartitionStore) and store.direct):
            pytest.skip("this filesystem refuses O_DIRECT: reads are copied as before")
        sh = client.register_app("lend").register_shuffle(1, 3, replicate=False)
        records = {p: [os.urandom(100_000 + p) for _ in range(30)] for p in range(3)}
        with sh.writer(0) as w:
            for p, rs in records.items():
                for r in rs:
                    w.write(p, r)
        for p in range(3):
            assert list(sh.reader(p)) == records[p]
        assert [list(r) for r in sh.readers(range(3))] == [records[p] for p in range(3)]
        assert pool.lent - lent >= 3 * 5  # ~3 MiB a partition, 512 KiB chunks
        deadline = time.monotonic() + 10
        while pool.free < pool.kept and time.monotonic() < deadline:
            time.sleep(0.05)  # pyzmq drops a sent frame's buffer on its own thread
        assert pool.free == pool.kept <= _direct.LEND_POOL_BYTES
        sh.unregister()
