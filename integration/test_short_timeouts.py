"""Issue 22 §1, through real processes: a master started with short timeouts
(``--worker-timeout 6s``, ``--app-timeout 8s``) keeps healthy members that run with the
default settings. The master tells workers and clients its timeouts in its registration
and heartbeat replies, and by default they heartbeat at no more than a third of them
(PROTOCOL §4). Before, workers and apps beat every 10 s whatever the master's timeout:
every worker was declared lost (a new shuffle got ``NOT_ENOUGH_WORKERS``), and every app
expired and had its shuffles' data deleted while it was still working."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from integration.procs import Proc, admin, wait_until

pytestmark = pytest.mark.integration

WORKERS = 3
OUTLIVE_S = 20.0  # more than three worker timeouts, and than two app timeouts
RECORDS = [b"record-%04d" % i for i in range(600)]


def _cluster(tmp_path: Path, *flags: str) -> Iterator[tuple[Proc, list[Proc], Path]]:
    """A master with ``flags`` and ``WORKERS`` workers left at their defaults."""
    data = tmp_path / "master"
    master = Proc(
        ["master", "--listen", "127.0.0.1:0", "--data-dir", str(data), "--grace", "1s", *flags],
        tmp_path / "master.log",
    )
    secret = data / "secret"
    workers: list[Proc] = []
    try:
        for i in range(WORKERS):
            args = ["worker", "--master", master.url, "--dirs", str(tmp_path / f"w{i}")]
            workers.append(Proc([*args, "--secret-file", str(secret)], tmp_path / f"w{i}.log"))
        wait_until(lambda: len(admin(master.url, "workers", secret_file=secret)) == WORKERS, timeout=30)
        yield master, workers, secret
    finally:
        for proc in [*workers, master]:
            proc.stop()


def _write(sh: croupier.Shuffle, map_id: int) -> None:
    with sh.writer(map_id) as w:
        for i, record in enumerate(RECORDS):
            if i % sh.num_mappers == map_id:
                w.write(i % sh.num_partitions, record)


def _read_all(sh: croupier.Shuffle) -> list[bytes]:
    return sorted(r for p in range(sh.num_partitions) for r in sh.reader(p))


@pytest.fixture
def short_timeouts(tmp_path: Path) -> Iterator[tuple[Proc, list[Proc], Path]]:
    # both timeouts in one cluster: the workers and the app outlive them over the same 20 s
    yield from _cluster(tmp_path, "--worker-timeout", "6s", "--app-timeout", "8s")


def test_default_workers_and_apps_outlive_a_6s_worker_and_an_8s_app_timeout(
    short_timeouts: tuple[Proc, list[Proc], Path],
) -> None:
    master, workers, secret = short_timeouts
    with croupier.connect(master.url) as client:
        app = client.register_app("short-timeouts")
        sh = app.register_shuffle(num_mappers=2, num_partitions=4)
        _write(sh, 0)
        time.sleep(OUTLIVE_S / 2)  # mid-job: one map ended, one to go
        _write(sh, 1)
        time.sleep(OUTLIVE_S / 2)  # committed: its data must stay until the app ends
        statuses = [w["status"] for w in admin(master.url, "workers", secret_file=secret)]
        assert statuses == ["active"] * WORKERS, statuses
        assert [a["app_id"] for a in admin(master.url, "apps", secret_file=secret)] == [app.app_id]
        assert _read_all(sh) == sorted(RECORDS)  # every copy is still known and readable
        assert app.heartbeats >= 6  # every 8 s / 3 at most, not every 10 s
        again = app.register_shuffle(num_mappers=2, num_partitions=4)  # placed on live workers
        _write(again, 0)
        _write(again, 1)
        assert _read_all(again) == sorted(RECORDS)
        app.unregister()
    for worker in workers:
        # the interval each worker chose, and why, is logged at registration
        assert "worker timeout is 6s: heartbeats every 2s" in worker.log(), worker.log()[-2000:]
