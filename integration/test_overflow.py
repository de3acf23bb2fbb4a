"""Issue 26, "Overflow", through real processes, small filesystems (tmpfs, root only) and a real S3
server (SeaweedFS): when every worker's disk is full mid-shuffle, the writers still succeed (the
new data goes to the bucket instead of ``HARD_SPLIT``), the readers read every record exactly once,
and the bytes the disks could not hold are shown to be objects in the bucket. A worker killed
after its overflow, before or after the commit, loses nothing: the other copy (or its objects)
serves.

Before the overflow, these writers failed: the flushes found no room, the partitions were split
hard, and no worker had room for their new epochs (``NOT_ENOUGH_WORKERS``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.config import ClientConfig
from croupier.services.local import LocalCluster
from croupier.transports.objstore import ObjectStore
from integration.procs import fault_cluster
from integration.test_data_plane import wait_lost
from integration.test_disk_full import records, small_filesystems, write_map

pytestmark = pytest.mark.integration

MiB = 1024**2
WORKERS, PARTITIONS = 3, 6
# a failed revive is raised within seconds (the old code's failure), not after the default minute
CONFIG = ClientConfig(rpc_timeout=3.0, failover_deadline=3.0)
# a 2 MiB reserve on 8 MiB disks
SETTINGS: dict[str, Any] = {"memory_tier_max": 0, "disk_reserve": 2 * MiB}


@contextlib.contextmanager
def small_cluster(base: Path, url: str, **settings: Any) -> Iterator[LocalCluster]:
    disks = [base / f"worker{i}" / "disk0" for i in range(WORKERS)]
    with (
        small_filesystems(disks, "8m"),
        fault_cluster(WORKERS, base, **SETTINGS, **settings, object_store=url) as cl,
    ):
        yield cl


@pytest.fixture
def cluster(tmp_path: Path, bucket: tuple[str, ObjectStore]) -> Iterator[LocalCluster]:
    with small_cluster(tmp_path / "cluster", bucket[0]) as cl:
        yield cl


@pytest.fixture
def splitting(tmp_path: Path, bucket: tuple[str, ObjectStore]) -> Iterator[LocalCluster]:
    """Partitions split every MiB: new epochs are placed after the disks filled (on full
    workers, which overflow) and created in the bucket from their first byte."""
    with small_cluster(tmp_path / "cluster", bucket[0], split_threshold=MiB) as cl:
        yield cl


def fill(cluster: LocalCluster, keep: int = 1536 * 1024) -> None:
    """Leave ``keep`` bytes free on every worker's disk: below its reserve, every disk is full."""
    for i in range(WORKERS):
        d = cluster.base_dir / f"worker{i}" / "disk0"
        st = os.statvfs(d)
        (d / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - keep))


def write(sh: croupier.Shuffle, maps: range, expected: dict[int, list[bytes]]) -> None:
    """Write ``maps`` (3 MiB each); every writer must succeed."""
    for m in maps:
        recs = records(m, PARTITIONS, 3 * MiB, 32 * 1024)
        assert write_map(sh, m, recs) is None, f"map {m}"
        for p, items in recs.items():
            expected[p].extend(items)


def exactly_once(sh: croupier.Shuffle, expected: dict[int, list[bytes]]) -> None:
    for p, items in expected.items():
        got = list(sh.reader(p))
        assert len(got) == len(items) and sorted(got) == sorted(items), f"partition {p}"


def on_disks(cluster: LocalCluster) -> dict[str, int]:
    """``<partition>-<epoch>-<role>`` -> bytes of each copy's data file on the workers' disks."""
    files = cluster.base_dir.glob("worker*/disk0/*/*/*.data")
    return {f.name.removesuffix(".data"): f.stat().st_size for f in files}


def test_disk_full_on_every_worker_mid_shuffle_the_writers_succeed_and_the_data_is_in_the_bucket(
    splitting: LocalCluster, bucket: tuple[str, ObjectStore]
) -> None:
    cluster, (url, store) = splitting, bucket
    with croupier.connect(cluster.master_url, config=CONFIG) as client:
        client.object_store = url
        app = client.register_app("overflow")
        sh = app.register_shuffle(num_mappers=4, num_partitions=PARTITIONS)
        expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        write(sh, range(1), expected)  # on the disks
        fill(cluster)
        write(sh, range(1, 4), expected)  # 9 MiB, 18 MiB with the replicas, on ~1.5 MiB free
        exactly_once(sh, expected)
        # the copies that are not on any disk are whole objects in the bucket, and they hold
        # what the disks could not: every byte pushed after they filled, but the ~1.5 MiB left
        disks = on_disks(cluster)
        objects = {o.key: o.size for o in store.list(f"{sh.app_id}/{sh.shuffle_id}/")}
        data = {k: n for k, n in objects.items() if k.endswith(".data")}
        spilled = {k: n for k, n in data.items() if k.split("/")[-1].removesuffix(".data") not in disks}
        pushed_after = 2 * 9 * MiB
        assert sum(spilled.values()) >= pushed_after - WORKERS * 1536 * 1024, (disks, objects)
        for k in spilled:  # each with its index object (written at the commit, after the data)
            assert k.removesuffix(".data") + ".index" in objects
        # epochs placed after the disks filled were written to the bucket too
        assert any(
            not k.split("/")[-1].startswith(tuple(f"{p}-0-" for p in range(PARTITIONS))) for k in spilled
        )
        app.unregister()


def test_workers_killed_after_their_overflow_before_and_after_the_commit_lose_nothing(
    cluster: LocalCluster, bucket: tuple[str, ObjectStore]
) -> None:
    url, _ = bucket
    with croupier.connect(cluster.master_url, config=CONFIG) as client:
        client.object_store = url
        app = client.register_app("overflow-kill")
        sh = app.register_shuffle(num_mappers=3, num_partitions=PARTITIONS)
        expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        fill(cluster)
        write(sh, range(2), expected)  # overflowed: in open uploads until the commit
        # before the commit: worker 1's uploads never complete; its copies are lost, not the data
        wait_lost(cluster, {cluster.kill_worker(1)})
        write(sh, range(2, 3), expected)  # the commit: every other copy is a whole object
        exactly_once(sh, expected)  # from the live workers, which read their objects
        # after the commit: every worker gone, every record from the bucket alone
        sh.wait_offloaded(60)
        wait_lost(cluster, {cluster.kill_worker(i) for i in (0, 2)})
        exactly_once(sh, expected)
        app.unregister()
