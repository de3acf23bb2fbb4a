"""Restart safety with real processes: kill -9 the master, restart it on the same data dir."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.proof import WinnerRuns
from croupier.transports.master_client import MasterClient
from integration.procs import Proc, admin, member_signer
from tests.acking import acking_control_port

pytestmark = pytest.mark.integration


@pytest.fixture
def control() -> Iterator[int]:
    """The fake workers' control port: it acks RESERVE (tests/acking.py)."""
    with acking_control_port() as port:
        yield port


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def durable(status: dict[str, object]) -> dict[str, object]:
    return {k: status[k] for k in ("workers", "apps", "shuffles", "seq", "term")}


def test_kill_9_and_restart_keeps_workers_apps_shuffles_and_placements(
    tmp_path: Path, procs: list[Proc], control: int
) -> None:
    data = tmp_path / "master"
    master = Proc(["master", "--listen", "127.0.0.1:0", "--data-dir", str(data)], tmp_path / "m1.log")
    procs.append(master)
    rng = random.Random(3)
    with MasterClient(master.url, signer=member_signer(data / "secret")) as client:
        for i in range(4):
            client.call(
                c.RegisterWorker(f"w{i}", "127.0.0.1", control, 7100 + i, 7200 + i, 7300 + i, 5000, "i1")
            )
        apps = [client.call(c.RegisterApp(f"job{i}"))["app_id"] for i in range(3)]
        sizes = []
        for app in apps:
            for _ in range(3):
                sizes.append(rng.randint(1, 200))
                client.call(c.RegisterShuffle(str(app), num_mappers=20, num_partitions=sizes[-1]))
        touched = min(5, sizes[0])
        declared = encode_bitmap(from_partitions(range(touched), sizes[0]))
        for m in range(20):
            client.call(c.MapperEnd(str(apps[0]), 0, m, rng.randint(0, 2), touched, declared))
        client.call(c.RevivePartition(str(apps[1]), 1, 0, 0, failed_workers=("w0",)))
        client.call(c.UnregisterShuffle(str(apps[2]), 2))
        client.call(c.ExcludeWorker("w3"))
    before = admin(master.url, "status", secret_file=data / "secret")
    assert len(before["workers"]) == 4 and len(before["apps"]) == 3 and len(before["shuffles"]) == 8

    master.kill9()
    restarted = Proc(["master", "--listen", "127.0.0.1:0", "--data-dir", str(data)], tmp_path / "m2.log")
    procs.append(restarted)
    after = admin(restarted.url, "status", secret_file=data / "secret")
    assert durable(after) == durable(before)
    # admin's other views agree
    # ``admin workers`` adds soft state (each worker's HTTP port and disks, from heartbeats)
    rows = admin(restarted.url, "workers", secret_file=data / "secret")
    assert [{k: v for k, v in row.items() if k not in ("http_port", "dirs")} for row in rows] == before[
        "workers"
    ]
    assert admin(restarted.url, "shuffles", secret_file=data / "secret") == before["shuffles"]


def test_acknowledged_commands_survive_repeated_kill_9(
    tmp_path: Path, procs: list[Proc], control: int
) -> None:
    data = tmp_path / "master"
    acked: list[int] = []
    for round_ in range(3):
        master = Proc(
            ["master", "--listen", "127.0.0.1:0", "--data-dir", str(data)], tmp_path / f"m{round_}.log"
        )
        procs.append(master)
        with MasterClient(master.url, attempts=1, signer=member_signer(data / "secret")) as client:
            if round_ == 0:
                client.call(c.RegisterWorker("w0", "127.0.0.1", control, 2, 3, 4, 10**6, "i1"))
                client.call(c.RegisterApp("job", "app"))
                client.call(
                    c.RegisterShuffle(
                        "app", num_mappers=3000, num_partitions=1, replicate=False, shuffle_id=0
                    )
                )
            for m in range(round_ * 200, round_ * 200 + 200):
                client.call(c.MapperEnd("app", 0, m, 0, 1, "AQ=="))
                acked.append(m)
        master.kill9()
    final = Proc(["master", "--listen", "127.0.0.1:0", "--data-dir", str(data)], tmp_path / "final.log")
    procs.append(final)
    with MasterClient(final.url, signer=member_signer(data / "secret")) as client:
        shuffle = client.call(c.GetShuffle("app", 0))
        assert shuffle["mappers_ended"] == len(acked) == 600
        loc = client.call(c.GetLocations("app", 0, 0))
        runs = loc["winner_runs"]
        assert isinstance(runs, list)
        winners = WinnerRuns(runs, int(str(loc["num_mappers"])))
        assert all(winners[m] == 0 for m in acked)
