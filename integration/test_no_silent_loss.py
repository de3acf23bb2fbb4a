"""Issue 12 through real processes: a damaged, missing or destroyed copy is read from the other
copy, a loss raises ``DataLostError`` naming the partition, and a losing attempt's bad batch
never fails a read."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core import commands as c
from croupier.core.batch import BATCH_HEADER, iter_batches
from croupier.core.codec import to_json
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.core.dataplane import Destroy
from croupier.core.errors import DataLostError
from croupier.core.wire import MsgType
from croupier.services.local import LocalCluster
from croupier.tools.verify_damage import damage_copy
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from integration.conftest import local_cluster
from integration.test_data_plane import check_all, write_all

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path, worker_timeout=5.0) as cl:
        yield cl


def files(cluster: LocalCluster, sh: croupier.Shuffle, suffix: str, role: str = "*") -> list[Path]:
    return sorted(cluster.base_dir.glob(f"worker*/disk0/{sh.app_id}/{sh.shuffle_id}/*-{role}.{suffix}"))


def restart_all(cluster: LocalCluster) -> None:
    """Restart every worker on its directories and wait until each registered again."""
    before = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}
    for i in range(len(before)):
        cluster.restart_worker(i)
    for _ in range(300):
        now = {w["worker_id"]: (w["incarnation"], w["status"]) for w in cluster.status()["workers"]}
        if all(now[w][0] != inc and now[w][1] == "active" for w, inc in before.items()):
            return
        threading.Event().wait(0.1)
    raise AssertionError("the workers did not register again")


def damage_then_restart(cluster: LocalCluster, damage: Callable[[Path], None], suffix: str) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app(f"damaged-{suffix}")
        sh = app.register_shuffle(num_mappers=2, num_partitions=6)
        expected = write_all(sh, 2, 6, 200)
        check_all(sh, expected)  # committed, every copy intact
        primaries = files(cluster, sh, "data", "primary")
        assert len(primaries) == 6
        for path in primaries:
            if suffix == "data":
                damage(path)
            else:  # its record in the dir's index.log
                assert flip_index(cluster, sh, path.name.removesuffix(".data"))
        restart_all(cluster)
        check_all(sh, expected)  # each record exactly once, from the replicas
        app.unregister()


def flip_index(cluster: LocalCluster, sh: croupier.Shuffle, name: str) -> list[str]:
    """Flip a byte of the copy's index record (``croupier verify``'s damage); what was done."""
    dirs = sorted(cluster.base_dir.glob("worker*/disk0"))
    return damage_copy(dirs, sh.app_id, sh.shuffle_id, name, "flip-index", random.Random(name))


def flip_a_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def cut_ten_bytes(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 10)


def test_a_primary_index_with_a_flipped_byte_is_read_from_the_replica(cluster: LocalCluster) -> None:
    damage_then_restart(cluster, flip_a_byte, "index")


def test_a_primary_data_file_cut_short_is_read_from_the_replica(cluster: LocalCluster) -> None:
    damage_then_restart(cluster, cut_ten_bytes, "data")


def test_both_copies_index_damaged_is_data_lost_not_an_empty_read(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("both-damaged")
        sh = app.register_shuffle(num_mappers=1, num_partitions=3)
        expected = write_all(sh, 1, 3, 100)
        check_all(sh, expected)
        victims = files(cluster, sh, "data")
        damaged = [p for p in victims if p.name.startswith("1-")]
        assert len(damaged) == 2  # partition 1, epoch 0: its primary and its replica
        for path in damaged:
            assert flip_index(cluster, sh, path.name.removesuffix(".data"))
        restart_all(cluster)
        with pytest.raises(DataLostError) as info:
            list(sh.reader(1))
        assert info.value.partitions == [1]
        assert info.value.details["maps"] == [[0, 1]]
        check_all(sh, {p: expected[p] for p in (0, 2)})
        app.unregister()


def test_a_destroy_that_reached_one_worker_leaves_the_other_copies_readable(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("half-destroyed")
        sh = app.register_shuffle(num_mappers=2, num_partitions=6)
        expected = write_all(sh, 2, 6, 200)
        check_all(sh, expected)
        member = Signer.member(cluster.secret)
        with MasterClient(cluster.master_url, signer=member) as master:
            worker = master.call(c.Status())["workers"][0]
        with RpcClient(f"tcp://127.0.0.1:{worker['control_port']}", signer=member) as rpc:
            reply = rpc.call(MsgType.DESTROY, to_json(Destroy(sh.app_id, sh.shuffle_id)))
        assert reply.body["removed"] > 0
        check_all(sh, expected)
        app.unregister()


def test_a_bad_batch_of_a_losing_attempt_does_not_fail_the_partition(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("bad-loser")
        sh = app.register_shuffle(num_mappers=2, num_partitions=1, replicate=True)
        winner = [f"win-{i}".encode() for i in range(50)]
        with sh.writer(0, attempt_id=1) as w:
            for r in winner:
                w.write(0, r)
        assert w.won
        with sh.writer(0, attempt_id=0) as loser:  # ends second: it loses, its batches stay on disk
            loser.write(0, b"lost-" * 20)
        assert not loser.won
        with sh.writer(1) as w:
            w.write(0, b"other")
        check_all(sh, {0: [*winner, b"other"]})  # committed
        flipped = 0
        for path in files(cluster, sh, "data"):
            raw = bytearray(path.read_bytes())
            for offset, header, _ in iter_batches(memoryview(raw)):
                if (header.map_id, header.attempt_id) == (0, 0) and header.length:
                    raw[offset + BATCH_HEADER.size] ^= 0xFF  # the loser's data no longer matches
                    flipped += 1
            path.write_bytes(bytes(raw))
        assert flipped == 2  # in both copies
        check_all(sh, {0: [*winner, b"other"]})
        app.unregister()


def test_one_bad_batch_in_both_copies_is_data_lost_for_that_map_only(tmp_path: Path) -> None:
    # issue 22 §3.13: a bad digest used to make the reader drop the rest of the copy, so the
    # maps whose batches came after it were named lost too, though every copy held them.
    # No memory tier: the workers serve every fetch from the files damaged below.
    with (
        LocalCluster(
            3,
            tmp_path / "cluster",
            processes=True,
            master_config=MasterConfig(worker_timeout=5.0, takeover_grace=1.0),
            worker_config=WorkerConfig(heartbeat_interval=0.5, memory_tier_max=0),
        ) as cluster,
        croupier.connect(cluster.master_url) as client,
    ):
        app = client.register_app("one-bad-batch")
        sh = app.register_shuffle(num_mappers=3, num_partitions=2, replicate=True)
        # under 1 MiB a partition, so that readers() takes it whole in a FETCH_SMALL
        records = {m: [f"map{m}-{i:05d}-".encode() * 100 for i in range(150)] for m in range(3)}
        for m in range(3):  # one map after the other: map 0's batches come first in the files
            with sh.writer(m) as w:
                for r in records[m]:
                    w.write(0, r)
                w.write(1, f"map{m}".encode())
        expected = {0: [r for m in range(3) for r in records[m]], 1: [b"map0", b"map1", b"map2"]}
        check_all(sh, expected)  # committed, every copy intact
        damaged = 0
        for path in files(cluster, sh, "data"):
            if not path.name.startswith("0-"):
                continue
            raw = bytearray(path.read_bytes())
            batches = [(o, h) for o, h, _ in iter_batches(memoryview(raw)) if h.map_id == 0 and h.length]
            assert len(batches) > 2  # map 0 sent several batches: damage its second one only
            offset, _ = batches[1]
            raw[offset + BATCH_HEADER.size + 7] ^= 0xFF
            path.write_bytes(bytes(raw))
            damaged += 1
        assert damaged == 2  # partition 0's primary and replica
        with pytest.raises(DataLostError) as info:
            list(sh.reader(0))
        assert info.value.partitions == [0]
        assert info.value.details["maps"] == [[0, 0]]
        with pytest.raises(DataLostError) as info:  # the same through FETCH_SMALL (readers())
            for reader in sh.readers([0]):
                list(reader)
        assert info.value.details["maps"] == [[0, 0]]
        check_all(sh, {1: expected[1]})
        app.unregister()
