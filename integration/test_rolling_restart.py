"""Issue 15, decommission that drains, through real processes: while a stream of shuffles
runs (each written, read back and unregistered), every worker in turn is decommissioned
with ``croupier admin decommission --wait`` (which returns once it is drained), exits 0
by itself, and is started again. No shuffle of the stream loses or repeats a record, and
no writer fails. The workers' split threshold is 16 KiB, so every partition of the stream
also splits soft at least once: soft and hard splits mix."""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from integration.procs import CLI

pytestmark = pytest.mark.integration

PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        3,
        tmp_path / "cluster",
        processes=True,
        master_config=MasterConfig(worker_timeout=5.0, takeover_grace=1.0),
        worker_config=WorkerConfig(heartbeat_interval=0.3, split_threshold=16 * 1024),
    ) as cl:
        yield cl


class Stream:
    """Shuffles one after the other on a thread until ``stop``: each is written by two maps,
    read back whole, compared and unregistered. ``failures`` holds what went wrong.

    With ``hold`` set, the next shuffle's first map stops halfway (``holding`` set) until
    ``release``: the test decommissions a worker under an open writer."""

    def __init__(self, master_url: str) -> None:
        self.master_url = master_url
        self.stop = threading.Event()
        self.shuffles = 0
        self.records = 0
        self.revived = 0  # revives of the writers (HARD_SPLIT from a decommissioning worker)
        self.soft_splits = 0  # each partition's ~29 KB pass the 16 KiB split threshold
        self.failures: list[str] = []
        self.hold, self.holding, self.release = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, name="shuffle-stream")

    def _run(self) -> None:
        config = ClientConfig(rpc_timeout=5.0, push_buffer_size=4096, push_merge_size=32 * 1024)
        try:
            with croupier.connect(self.master_url, config=config) as client:
                app = client.register_app("rolling")
                while not self.stop.is_set():
                    self._one(app)
                app.unregister()
        except Exception as exc:  # reported by the test
            self.failures.append(f"{type(exc).__name__}: {exc}")

    def _one(self, app: croupier.App) -> None:
        sh = app.register_shuffle(num_mappers=2, num_partitions=PARTITIONS)
        n = self.shuffles
        written: dict[int, Counter[bytes]] = {p: Counter() for p in range(PARTITIONS)}
        for m in range(2):
            with sh.writer(m) as w:
                for i in range(400):
                    if i == 200 and m == 0 and self.hold.is_set():
                        self.hold.clear()
                        self.holding.set()
                        self.release.wait(60)
                        self.release.clear()
                    p = i % PARTITIONS
                    r = b"s%d-m%d-i%d-" % (n, m, i) + b"y" * 200
                    w.write(p, r)
                    written[p][r] += 1
            self.revived += w.stats["revived"]
            self.soft_splits += w.stats["soft_splits"]
        for p in range(PARTITIONS):
            got = Counter(sh.reader(p))
            if got != written[p]:
                self.failures.append(
                    f"shuffle {n} partition {p}: {sum(got.values())} of {sum(written[p].values())} records"
                )
        sh.unregister()
        self.shuffles += 1
        self.records += 800


def decommission_under_a_writer(cluster: LocalCluster, i: int, stream: Stream) -> list[dict[str, object]]:
    """Decommission worker ``i`` with ``admin decommission --wait`` while a writer of the
    stream is open; let the writer go on once the worker knows. The admin command's lines."""
    stream.hold.set()
    assert stream.holding.wait(60)
    stream.holding.clear()
    worker_id = cluster.worker_ids()[i]
    admin = subprocess.Popen(
        [
            *CLI,
            "admin",
            "--master",
            cluster.master_url,
            "--secret-file",
            str(cluster.secret_file),
            "--json",
            "decommission",
            worker_id,
            "--wait",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = cluster.base_dir / f"worker{i}.log"
        for _ in range(300):  # the worker learns it at its next heartbeat
            if (
                "is decommissioning"
                in log.read_text(errors="replace").split("registered with the master")[-1]
            ):
                break
            threading.Event().wait(0.1)
        stream.release.set()
        out, err = admin.communicate(timeout=120)
    finally:
        if admin.poll() is None:
            admin.kill()
            admin.communicate()
    assert admin.returncode == 0, err
    return [json.loads(line) for line in out.strip().splitlines()]


def test_a_rolling_restart_of_every_worker_during_a_stream_of_shuffles_loses_nothing(
    cluster: LocalCluster,
) -> None:
    stream = Stream(cluster.master_url)
    stream.thread.start()
    try:
        for i, worker_id in enumerate(cluster.worker_ids()):
            before = stream.shuffles
            lines = decommission_under_a_writer(cluster, i, stream)
            assert lines[0]["status"] == "decommissioning"  # the open shuffle holds slots on it
            assert lines[-1] == {"worker_id": worker_id, "status": "drained", "drained": True}
            child = cluster._worker_child(i).popen  # the drained worker exits by itself, with 0
            assert child.wait(timeout=30) == 0
            cluster.restart_worker(i)
            cluster.wait_for_workers(3)
            while stream.shuffles < before + 2 and not stream.failures:  # traffic on the new one too
                threading.Event().wait(0.1)
    finally:
        stream.stop.set()
        stream.thread.join(timeout=120)
    assert stream.failures == []
    assert stream.shuffles >= 6 and stream.revived >= 3  # each open writer moved off its worker
    assert stream.soft_splits >= stream.shuffles
    print(
        f"{stream.shuffles} shuffles, {stream.records} records,"
        f" {stream.revived} revives, {stream.soft_splits} soft splits"
    )
    statuses = {w["worker_id"]: w["status"] for w in cluster.status()["workers"]}
    assert sorted(statuses.values()) == ["active"] * 3
