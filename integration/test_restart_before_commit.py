"""Issue 12: a worker kill -9'd and restarted on its own dirs before the commit loses no record.

Some maps close, worker ``i`` is killed and started again (a new incarnation with empty
memory), the other maps write and close, and every partition is read back. Each worker's
copies placed before its restart lost their memory: the commit must fail them, so readers
read the sibling copies instead of a copy that holds only the later maps' data.
"""

from __future__ import annotations

import threading

import pytest

import croupier
from croupier.core.config import ClientConfig
from croupier.services.local import LocalCluster

pytestmark = pytest.mark.integration

MAPPERS = 6
PARTITIONS = 9
RECORDS = 150


def _records(map_id: int) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(RECORDS):
        p = (map_id * 7 + i) % PARTITIONS
        out[p].append(f"m{map_id}-r{i}-".encode() + bytes(i % 251 for _ in range(200 + 13 * i)))
    return out


def _write(sh: croupier.Shuffle, map_id: int, expected: dict[int, list[bytes]]) -> None:
    recs = _records(map_id)
    with sh.writer(map_id, 0) as w:
        for p, items in recs.items():
            for r in items:
                w.write(p, r)
    for p, items in recs.items():
        expected[p].extend(items)


def _wait_new_incarnation(cluster: LocalCluster, wid: str, old: str) -> None:
    for _ in range(300):
        now = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}
        if now.get(wid, old) != old:
            return
        threading.Event().wait(0.1)
    raise AssertionError(f"worker {wid} did not register again")


@pytest.mark.parametrize("restarted", [0, 1, 2])
def test_restart_before_commit_each_worker_in_turn_reads_every_record_once(
    cluster: LocalCluster, restarted: int
) -> None:
    with croupier.connect(cluster.master_url, config=ClientConfig(fetch_timeout=2.0)) as client:
        app = client.register_app("restart-before-commit")
        sh = app.register_shuffle(num_mappers=MAPPERS, num_partitions=PARTITIONS)
        expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        for m in range(MAPPERS // 2):
            _write(sh, m, expected)
        wid = cluster._worker_procs[restarted].first_line
        old = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}[wid]
        cluster.kill_worker(restarted)
        cluster.restart_worker(restarted)
        _wait_new_incarnation(cluster, wid, old)
        # the later maps are new tasks: they open the shuffle afresh and see the new incarnation
        later = client.open_shuffle(sh.app_id, sh.shuffle_id)
        for m in range(MAPPERS // 2, MAPPERS):
            _write(later, m, expected)
        for p, items in expected.items():
            got = list(sh.reader(p))
            assert len(got) == len(set(got)) == len(items), f"partition {p}: {len(got)} of {len(items)}"
            assert sorted(got) == sorted(items), f"partition {p}"
        app.unregister()
