"""Issue 16 through real processes: after a double fault past the commit, ``Shuffle.rerun``
recomputes only the lost maps, and every record is read exactly once again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import Conflict, DataLostError
from croupier.services.local import LocalCluster
from integration.procs import fault_cluster, wait_until
from integration.test_data_plane import check_all, wait_lost

pytestmark = pytest.mark.integration

MAPS, PARTITIONS = 8, 16
FAST = ClientConfig(rpc_timeout=5.0, fetch_timeout=3.0)


@pytest.fixture(params=[5])
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with fault_cluster(request.param, tmp_path / "cluster") as cl:
        yield cl


def records(map_id: int) -> dict[int, list[bytes]]:
    """Map ``m`` writes partitions ``2m`` and ``2m + 1`` only, so a lost partition loses one map."""
    return {
        p: [f"m{map_id}-p{p}-r{i}".encode() * 20 for i in range(150)] for p in (2 * map_id, 2 * map_id + 1)
    }


def write(sh: croupier.Shuffle, map_id: int, attempt: int) -> dict[str, int]:
    with sh.writer(map_id, attempt) as w:
        for p, items in records(map_id).items():
            for r in items:
                w.write(p, r)
    return w.stats


def expected() -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for m in range(MAPS):
        for p, items in records(m).items():
            out[p].extend(items)
    return out


def holders(cluster: LocalCluster, sh: croupier.Shuffle, partition: int) -> list[int]:
    """The indexes of the workers holding ``partition``'s current epoch."""
    ids = cluster.worker_ids()
    location = sh.routing.current(partition)
    names = [location.primary.worker_id, location.replica.worker_id if location.replica else None]
    return [ids.index(w) for w in names if w is not None]


def lost_after(sh: croupier.Shuffle, maps: list[int]) -> list[int]:
    """The maps the master names lost, once it names every one of ``maps``."""
    for _ in range(200):
        lost = sh.lost_map_ids()
        if set(maps) <= set(lost):
            return lost
        threading.Event().wait(0.1)
    raise AssertionError(f"the master never named maps {maps} lost")


def test_a_double_fault_after_commit_is_recovered_by_rerunning_only_the_lost_maps(
    cluster: LocalCluster,
) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("rerun")
        sh = app.register_shuffle(num_mappers=MAPS, num_partitions=PARTITIONS)
        for m in range(MAPS):
            write(sh, m, 0)
        want = expected()
        check_all(sh, want)  # committed, every copy intact
        killed = {cluster.kill_worker(i) for i in holders(cluster, sh, 0)}
        with pytest.raises(DataLostError) as info:
            list(sh.reader(0))
        assert info.value.map_ids == [0] and info.value.pairs == [(0, 0)]
        wait_lost(cluster, killed)
        lost = lost_after(sh, info.value.map_ids)
        assert 0 < len(lost) < MAPS
        intact = next(m for m in range(MAPS) if m not in lost)
        with pytest.raises(Conflict) as refused:
            sh.rerun([intact])
        assert refused.value.details["maps"] == [intact]
        reply = sh.rerun(lost)
        assert reply.started and {m for lo, hi in reply.maps for m in range(lo, hi)} == set(lost)
        with pytest.raises(Conflict):
            write(sh, lost[0], 0)  # the lost attempt may never win again
        for m in lost:
            write(sh, m, 1)
        check_all(sh, want)  # every record exactly once: new attempts for the lost maps
        view = sh.lost_maps()
        assert (
            view["lost"] == [] and view["committed"] and sum(hi - lo for lo, hi in view["rerun"]) == len(lost)
        )
        app.unregister()


@pytest.mark.parametrize("cluster", [3], indirect=True)  # partitions share the restarted pair
def test_a_rerun_survives_a_worker_killed_during_it(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("rerun-fault")
        sh = app.register_shuffle(num_mappers=MAPS, num_partitions=PARTITIONS)
        for m in range(MAPS):
            write(sh, m, 0)
        want = expected()
        check_all(sh, want)
        # both copies of partition 2 (map 1's data) vanish: their workers come back without them
        before = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}
        places = holders(cluster, sh, 2)
        for path in cluster.base_dir.glob(f"worker*/disk0/{sh.app_id}/{sh.shuffle_id}/2-0-*"):
            path.unlink()
        shared = [p for p in range(PARTITIONS) if p != 2 and set(holders(cluster, sh, p)) == set(places)]
        assert shared  # their files survive the restart: the new commit must not call them lost
        for i in places:
            cluster.restart_worker(i)
        ids = [cluster.worker_ids()[i] for i in places]
        wait_until(lambda: all(_incarnation(cluster, w) not in (None, before[w]) for w in ids))
        with pytest.raises(DataLostError) as info:
            list(sh.reader(2))
        assert info.value.map_ids == [1]
        assert 1 in sh.lost_map_ids()  # suspect: on workers restarted since the placement
        sh.rerun(info.value.map_ids)
        # a single fault during the rerun: the primary of a new epoch dies before the writes
        cluster.kill_worker(holders(cluster, sh, 2)[0])
        stats = write(sh, 1, 1)  # pushes to the dead primary fail; the writer revives the partition
        assert stats["revived"] >= 1
        check_all(sh, want)
        assert sh.lost_maps()["lost"] == []  # the restarted workers' files still count
        app.unregister()


def _incarnation(cluster: LocalCluster, worker: str) -> str | None:
    for w in cluster.status()["workers"]:
        if w["worker_id"] == worker and w["status"] == "active":
            return str(w["incarnation"])
    return None
