"""A worker dies under the real LocalCluster: writers revive, readers use the replicas."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig
from tests.sdk.conftest import HAVE_LOCAL

pytestmark = pytest.mark.skipif(not HAVE_LOCAL, reason="croupier.services.local is not there yet")


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Any]:
    from croupier.services.local import LocalCluster  # type: ignore[import-not-found,unused-ignore]

    master = MasterConfig(worker_timeout=1.5, sweep_interval=0.1, takeover_grace=0)
    with LocalCluster(workers=3, base_dir=tmp_path, master_config=master) as cluster:
        yield cluster


def wait_lost(client: croupier.Client, worker_id: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(w["worker_id"] == worker_id and w["status"] == "lost" for w in client.status()["workers"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"{worker_id} was not declared lost")


def test_a_killed_worker_loses_no_acked_record(local: Any, config: ClientConfig) -> None:
    cfg = dataclasses.replace(config, rpc_timeout=1.0)
    with croupier.connect(local.master_url, config=cfg) as client:
        app = client.register_app("kill")
        sh = app.register_shuffle(num_mappers=2, num_partitions=6)
        written: Counter[bytes] = Counter()
        with sh.writer(0) as w:
            for i in range(600):
                w.write(i % 6, b"before-%d" % i)
                written[b"before-%d" % i] += 1
        victim = local.kill_worker(0)
        wait_lost(client, victim)
        with sh.writer(1) as w:
            for i in range(600):
                w.write(i % 6, b"after-%d" % i)
                written[b"after-%d" % i] += 1
        assert w.stats["revived"] >= 1
        got: Counter[bytes] = Counter()
        for p in range(6):
            got.update(sh.reader(p))
        assert got == written
        app.unregister()
