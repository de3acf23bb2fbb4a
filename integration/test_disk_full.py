"""Issue 15 through real processes, on small filesystems (tmpfs, root only): a shuffle larger
than the workers' disks either reads back completely or fails at the writer, never both
succeeds at the writer and loses at the reader; a worker with one full directory of two
writes to the other and reads back exactly."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.core.errors import CroupierError, NotEnoughWorkers
from croupier.services.local import LocalCluster
from croupier.tools.verify_disks import tmpfs_mounts

pytestmark = pytest.mark.integration

MiB = 1024**2


@contextlib.contextmanager
def small_filesystems(paths: list[Path], size: str) -> Iterator[None]:
    """Mount a tmpfs of ``size`` on each path; unmount them all at the end. Skips unless root."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(tmpfs_mounts(paths, size))
    except ValueError as exc:  # only the mounts: the test's own errors stay errors
        pytest.skip(str(exc))
    with stack:
        yield


def cluster(base: Path, workers: int, disks: int, reserve: int | None = None) -> LocalCluster:
    return LocalCluster(
        workers,
        base,
        processes=True,
        disks=disks,
        master_config=MasterConfig(worker_timeout=10.0, takeover_grace=1.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5, disk_reserve=reserve),
    )


def records(m: int, partitions: int, total: int, size: int) -> dict[int, list[bytes]]:
    """``total`` bytes of incompressible records of map ``m``, spread over the partitions."""
    rng = random.Random(m)
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(total // size):
        out[i % partitions].append(m.to_bytes(4, "big") + i.to_bytes(4, "big") + rng.randbytes(size - 8))
    return out


def write_map(
    sh: croupier.Shuffle, m: int, recs: dict[int, list[bytes]], attempt: int = 0
) -> CroupierError | None:
    """Write one map; the error its writer raised, or None when it succeeded."""
    try:
        with sh.writer(m, attempt) as w:
            for p, items in recs.items():
                for r in items:
                    w.write(p, r)
    except CroupierError as exc:
        return exc
    return None


def test_a_shuffle_larger_than_the_disks_never_succeeds_at_the_writer_and_loses_at_the_reader(
    tmp_path: Path,
) -> None:
    base = tmp_path / "cluster"
    dirs = [base / f"worker{i}" / "disk0" for i in range(2)]
    # a revive finds no worker with room: NOT_ENOUGH_WORKERS is retried rpc_timeout, then raised
    config = ClientConfig(rpc_timeout=3.0, failover_deadline=3.0)
    with (
        small_filesystems(dirs, "40m"),
        cluster(base, 2, 1) as cl,
        croupier.connect(cl.master_url, config=config) as client,
    ):
        app = client.register_app("disk-full")
        mappers, partitions = 10, 8
        sh = app.register_shuffle(num_mappers=mappers, num_partitions=partitions)
        expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        failed: dict[int, CroupierError] = {}
        for m in range(mappers):  # 10 MiB each: 100 MiB, two copies, on 2 x 40 MiB
            recs = records(m, partitions, 10 * MiB, 64 * 1024)
            error = write_map(sh, m, recs)
            if error is not None:
                failed[m] = error
                continue
            for p, items in recs.items():
                expected[p].extend(items)
        assert all(e.code in ("DATA_LOST", "HARD_SPLIT", "NOT_ENOUGH_WORKERS") for e in failed.values()), (
            failed
        )
        for m in failed:  # the failed maps run again, empty this time, so that the shuffle commits
            assert write_map(sh, m, {}, attempt=1) is None
        # whatever the writers acknowledged reads back, complete and exactly once
        for p, items in expected.items():
            got = list(sh.reader(p))
            assert sorted(got) == sorted(items), f"partition {p}: {len(got)} records, expected {len(items)}"
        # the full workers report it, and get no new slots
        assert wait_for(lambda: full_workers(cl) == 2), cl.status()["master"].get("worker_dirs")
        with pytest.raises(NotEnoughWorkers):
            app.register_shuffle(num_mappers=1, num_partitions=2)


def full_workers(cl: LocalCluster) -> int:
    """Workers whose last heartbeat reported no directory with free space at its reserve."""
    reported = cl.status()["master"].get("worker_dirs") or {}
    return sum(1 for dirs in reported.values() if all(free < reserve for _, free, _, reserve, _ in dirs))


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_shuffle_that_fits_small_disks_reads_back_exactly(tmp_path: Path) -> None:
    base = tmp_path / "cluster"
    dirs = [base / f"worker{i}" / "disk0" for i in range(2)]
    with small_filesystems(dirs, "40m"), cluster(base, 2, 1) as cl, croupier.connect(cl.master_url) as client:
        app = client.register_app("disk-fits")
        sh = app.register_shuffle(num_mappers=3, num_partitions=6)
        expected: dict[int, list[bytes]] = {p: [] for p in range(6)}
        for m in range(3):  # 15 MiB: 15 MiB a worker with both copies
            recs = records(m, 6, 5 * MiB, 32 * 1024)
            assert write_map(sh, m, recs) is None
            for p, items in recs.items():
                expected[p].extend(items)
        for p, items in expected.items():
            assert sorted(sh.reader(p)) == sorted(items)


def test_a_worker_whose_first_dir_is_full_writes_to_the_second(tmp_path: Path) -> None:
    base = tmp_path / "cluster"
    full = [base / f"worker{i}" / "disk0" for i in range(2)]
    with small_filesystems(full, "4m"):
        for d in full:  # leave ~256 KiB: files are created there (reserve 0), then moved
            (d / "filler").write_bytes(b"\0" * (4 * MiB - 256 * 1024))
        with cluster(base, 2, 2, reserve=0) as cl, croupier.connect(cl.master_url) as client:
            app = client.register_app("one-dir-full")
            sh = app.register_shuffle(num_mappers=2, num_partitions=8)
            expected: dict[int, list[bytes]] = {p: [] for p in range(8)}
            for m in range(2):
                recs = records(m, 8, 4 * MiB, 16 * 1024)
                assert write_map(sh, m, recs) is None
                for p, items in recs.items():
                    expected[p].extend(items)
            for p, items in expected.items():
                assert sorted(sh.reader(p)) == sorted(items)
            on_full = [f for d in full for f in d.rglob("*.data")]
            on_other = [f for i in range(2) for f in (base / f"worker{i}" / "disk1").rglob("*.data")]
            assert on_other and sum(f.stat().st_size for f in on_full) < 512 * 1024
