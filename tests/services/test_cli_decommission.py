"""``croupier worker --split-threshold`` and ``croupier admin decommission --wait``, against an
in-process cluster: ``--wait`` prints the slots still held while a registered shuffle holds
the worker, and returns 0 once it is drained (1 if it leaves otherwise)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.services.cli import admin, build_parser, main
from croupier.services.cli.worker import worker_config
from croupier.services.local import LocalCluster
from croupier.transports.secret import SECRET_ENV, create_secret_file


def test_the_split_threshold_flag() -> None:
    def config(*flags: str) -> WorkerConfig:
        return worker_config(build_parser().parse_args(["worker", "--master", "tcp://127.0.0.1:1", *flags]))

    assert config().split_threshold == WorkerConfig().split_threshold == 1024**3
    assert config("--split-threshold", "64MiB").split_threshold == 64 * 1024**2


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setattr(admin, "_DRAIN_POLL_S", 0.05)
    # admin always signs as a member; this in-process cluster is open and accepts that too
    create_secret_file(tmp_path / "secret")
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "secret"))
    master = MasterConfig(worker_timeout=2.0, sweep_interval=0.1, takeover_grace=0)
    worker = WorkerConfig(heartbeat_interval=0.1)
    with LocalCluster(2, tmp_path, master_config=master, worker_config=worker) as cluster:
        yield cluster


def run_admin(url: str, *args: str) -> tuple[list[int], threading.Thread]:
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(main(["admin", "--master", url, "--json", *args])))
    thread.start()
    return code, thread


def test_decommission_wait_follows_the_worker_until_it_is_drained(
    local: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = local.workers[0]
    with croupier.connect(local.master_url) as client:
        sh = client.register_app("hold").register_shuffle(1, 4)
        code, thread = run_admin(local.master_url, "decommission", worker.worker_id, "--wait")
        wait(lambda: worker.split.decommissioning)  # its next heartbeat told it
        assert thread.is_alive() and not worker.drained.is_set()
        sh.unregister()
        thread.join(20)
    assert code == [0]
    wait(worker.drained.is_set)  # at its next heartbeat
    lines: list[dict[str, Any]] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0] == {"worker_id": worker.worker_id, "status": "decommissioning", "used_slots": 4}
    assert lines[-1] == {"worker_id": worker.worker_id, "status": "drained", "drained": True}
    assert main(["admin", "--master", local.master_url, "--json", "workers"]) == 0
    rows = {r["worker_id"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {worker.worker_id: "drained", local.workers[1].worker_id: "active"}


def test_decommission_wait_fails_when_the_worker_is_lost_instead(
    local: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with croupier.connect(local.master_url) as client:
        client.register_app("hold").register_shuffle(1, 4)
        wid = local.kill_worker(0)
        code, thread = run_admin(local.master_url, "decommission", wid, "--wait")
        thread.join(20)
    assert code == [1]
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["status"] == "lost"


def wait(predicate: Any, timeout: float = 20.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        done.wait(0.05)
    raise AssertionError("timed out")


def test_a_process_cluster_gives_its_workers_every_worker_setting(tmp_path: Path) -> None:
    """``LocalCluster(processes=True)`` left the memory tier's settings out of its workers'
    command line: they ran with the defaults, whatever ``worker_config`` said."""
    config = WorkerConfig(
        heartbeat_interval=0.5,
        memory_cap=64 * 1024**2,
        partition_actors=3,
        flush_threshold=123_456,
        chunk_size=65_536,
        throttle_floor=1000,
        throttle_z=4.5,
        split_threshold=2 * 1024**2,
        memory_tier_max=0,
        memory_tier_fraction=0.25,
    )
    cluster = LocalCluster(1, tmp_path, processes=True, worker_config=config)
    cluster.master_url = "tcp://127.0.0.1:1"  # not started: only its workers' arguments are read
    args = build_parser().parse_args(cluster._worker_cli(0))
    got = worker_config(args)
    for name in (
        "heartbeat_interval",
        "memory_cap",
        "partition_actors",
        "flush_threshold",
        "chunk_size",
        "throttle_floor",
        "throttle_z",
        "split_threshold",
        "memory_tier_max",
        "memory_tier_fraction",
    ):
        assert getattr(got, name) == getattr(config, name), name
