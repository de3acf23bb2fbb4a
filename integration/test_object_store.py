"""Issue 26 through real processes and a real S3 server (SeaweedFS, tests/seaweed.py): committed
copies are offloaded to the object store; after ``wait_offloaded`` every worker can be killed and
every record is still read back exactly once, from the store; a damaged object is read from its
replica object, or is a DataLostError naming the pairs; unregistering or expiry deletes the
objects."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core.commands import ExpireApp
from croupier.core.config import MasterConfig
from croupier.core.errors import DataLostError, RequestTimeout
from croupier.core.sweep import CLAIMS
from croupier.services.cli import main as cli_main
from croupier.services.local import LocalCluster
from croupier.services.master import MasterService
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.objstore import ObjectStore, S3ObjectStore
from integration.procs import fault_cluster
from integration.test_data_plane import check_all, wait_lost, write_all

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path, bucket: tuple[str, ObjectStore]) -> Iterator[LocalCluster]:
    with fault_cluster(3, tmp_path / "cluster", memory_tier_max=0, object_store=bucket[0]) as cl:
        yield cl


def _exactly_once(sh: croupier.Shuffle, expected: dict[int, list[bytes]]) -> None:
    for p, items in expected.items():
        got = list(sh.reader(p))
        assert len(got) == len(items) and sorted(got) == sorted(items), f"partition {p}"


def _offload_shown(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """STATUS and ``croupier admin offload`` show every committed copy offloaded, in time."""
    for _ in range(300):
        offload = cluster.status()["offload"]
        if offload["pending_copies"] == 0:
            break
        assert offload["shuffles"] and offload["oldest_pending_seconds"] >= 0
        time.sleep(0.1)
    assert offload["committed_copies"] == offload["offloaded_copies"] == 12  # 6 partitions, 2 copies
    assert offload["pending_bytes"] == 0 and offload["shuffles"] == []
    argv = ["admin", "--master", cluster.master_url, "--secret-file", str(cluster.secret_file), "offload"]
    assert cli_main(argv) == 0
    assert "12/12 committed copies in the object store, 0 pending" in capsys.readouterr().out


def test_after_wait_offloaded_every_worker_can_die_and_every_record_reads_from_the_store(
    cluster: LocalCluster,
    bucket: tuple[str, ObjectStore],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, store = bucket
    opened: list[str] = []  # the S3 stores this process opens (a connection pool each)
    real_init = S3ObjectStore.__init__

    def counted(self: S3ObjectStore, url: str, bucket: str, prefix: str) -> None:
        opened.append(url)
        real_init(self, url, bucket, prefix)

    monkeypatch.setattr(S3ObjectStore, "__init__", counted)
    with croupier.connect(cluster.master_url) as client:
        client.object_store = url
        app = client.register_app("scale-to-zero")
        sh = app.register_shuffle(num_mappers=3, num_partitions=6)
        expected = write_all(sh, 3, 6, 300)
        check_all(sh, expected)  # committed; read from the workers
        sh.wait_offloaded(60)
        data = [o for o in store.list(f"{sh.app_id}/{sh.shuffle_id}/") if o.key.endswith(".data")]
        assert len(data) >= 6  # every partition's copies, in the bucket
        _offload_shown(cluster, capsys)
        ids = {cluster.kill_worker(i) for i in range(3)}
        wait_lost(cluster, ids)
        _exactly_once(sh, expected)  # from the store alone
        for reader in sh.readers(list(range(6))):  # and through the batched reads
            got = list(reader)
            assert sorted(got) == sorted(expected[reader.partition])
        assert opened == [url]  # one store for the client, not one per partition read
        app.unregister()


def test_a_damaged_object_is_read_from_its_replica_object_or_is_data_lost_naming_the_pairs(
    cluster: LocalCluster, bucket: tuple[str, ObjectStore]
) -> None:
    url, store = bucket
    with croupier.connect(cluster.master_url) as client:
        client.object_store = url
        app = client.register_app("damaged-object")
        sh = app.register_shuffle(num_mappers=2, num_partitions=2)
        expected = write_all(sh, 2, 2, 200)
        check_all(sh, expected)
        sh.wait_offloaded(60)
        prefix = f"{sh.app_id}/{sh.shuffle_id}/"
        # wait_offloaded needs one copy per epoch; this test damages both of partition 0
        for _ in range(300):
            if all(store.size(f"{prefix}0-0-{role}.index") for role in ("primary", "replica")):
                break
            time.sleep(0.1)
        ids = {cluster.kill_worker(i) for i in range(3)}
        wait_lost(cluster, ids)

        def flip(key: str) -> None:
            size = store.size(key)
            assert size is not None
            raw = bytearray(store.get_range(key, 0, size))
            raw[size // 2] ^= 0xFF
            store.put(key, bytes(raw))

        flip(f"{prefix}0-0-primary.data")
        _exactly_once(sh, {0: expected[0]})  # from the replica object
        flip(f"{prefix}0-0-replica.data")
        with pytest.raises(DataLostError) as info:
            list(sh.reader(0))
        assert info.value.partitions == [0]
        assert "object" in str(info.value)
        _exactly_once(sh, {1: expected[1]})
        app.unregister()


def _gone(store: ObjectStore, app_id: str) -> None:
    for _ in range(200):
        if not store.list(f"{app_id}/"):
            return
        time.sleep(0.1)
    raise AssertionError(f"objects left: {store.list(app_id + '/')}")


@pytest.mark.parametrize("how", ["unregister", "expiry"])
def test_unregister_and_expiry_delete_the_objects_with_every_worker_gone(
    cluster: LocalCluster, bucket: tuple[str, ObjectStore], how: str
) -> None:
    # the workers used to be the only ones deleting: with all of them gone the objects stayed
    url, store = bucket
    with croupier.connect(cluster.master_url) as client:
        client.object_store = url
        app = client.register_app("cleanup")
        sh = app.register_shuffle(num_mappers=2, num_partitions=4)
        write_all(sh, 2, 4, 50)
        sh.wait_offloaded(60)
        assert store.list(f"{sh.app_id}/")
        for i in range(3):  # the master deletes them (it was run with the workers' --object-store)
            cluster.kill_worker(i)
        if how == "unregister":
            app.unregister()
        else:  # what the app's actor sends when its heartbeats stop
            with MasterClient(cluster.master_url, signer=Signer.member(cluster.secret)) as master:
                assert master.call(ExpireApp(sh.app_id))["changed"]
        _gone(store, sh.app_id)


def test_the_orphan_sweep_deletes_only_unknown_apps_objects_of_croupier_s_layout(
    tmp_path: Path, bucket: tuple[str, ObjectStore]
) -> None:
    url, store = bucket
    grace = 3.0
    config = MasterConfig(object_store=url, orphan_grace=grace, orphan_interval=0.2, takeover_grace=0.0)
    kept = ["other-cluster/croupier/app-1/0/0-0-primary.data", "notes.txt"]  # not Croupier's layout here
    ghost = ["ghost-0a1b/0/0-0-primary.data", "ghost-0a1b/0/0-0-primary.index"]  # an unknown app's
    with (
        MasterService("tcp://127.0.0.1:0", tmp_path / "master", config=config) as master,
        croupier.connect(master.url) as client,
    ):
        live = client.register_app("live")
        ended = client.register_app("ended")
        kept.append(f"{live.app_id}/3/1-0-replica.data")
        for key in [*kept, *ghost, f"{ended.app_id}/0/0-0-primary.data"]:
            store.put(key, b"x")
        ended.unregister()  # no worker at all: the master deletes its objects
        _gone(store, ended.app_id)
        time.sleep(grace)
        fresh = "fresh-app/0/0-0-primary.data"  # unknown too, but younger than the grace
        store.put(fresh, b"x")
        want = sorted([*kept, fresh])
        for _ in range(50):
            listed = sorted(o.key for o in store.list() if not o.key.startswith(CLAIMS))
            if listed == want:
                break
            time.sleep(0.1)
        assert listed == want
        assert len(store.list(CLAIMS)) == 1  # this cluster's claim
        registry = master.metrics.registry
        assert registry.get_sample_value("croupier_master_orphan_apps_swept_total") == 1
        assert registry.get_sample_value("croupier_master_objects_deleted_total") == 1  # ended's
        live.unregister()


def test_two_clusters_on_one_prefix_keep_each_other_s_objects(
    tmp_path: Path, bucket: tuple[str, ObjectStore]
) -> None:
    """Two masters (two clusters: two data dirs) given one prefix: each app is unknown to the
    other cluster, and old enough to sweep. Neither sweeps; the metric and the log say why."""
    url, store = bucket
    store.put("notes.txt", b"x")  # makes the bucket (an operator's file: never swept)
    config = MasterConfig(object_store=url, orphan_grace=1.0, orphan_interval=0.2, takeover_grace=0.0)
    with (
        MasterService("tcp://127.0.0.1:0", tmp_path / "a", config=config) as a,
        MasterService("tcp://127.0.0.1:0", tmp_path / "b", config=config) as b,
        croupier.connect(a.url) as on_a,
        croupier.connect(b.url) as on_b,
    ):
        apps = [on_a.register_app("on-a"), on_b.register_app("on-b")]
        for _ in range(100):  # both claimed the prefix (their first ticks after the log loaded)
            if len(store.list(CLAIMS)) == 2:
                break
            time.sleep(0.05)
        keys = sorted(f"{app.app_id}/0/0-0-primary.data" for app in apps)
        for key in keys:
            store.put(key, b"x")
        time.sleep(1.0 + 2 * 0.2 + 1.0)  # older than the grace, several sweeps
        skipped = [
            m.metrics.registry.get_sample_value("croupier_master_orphan_sweeps_skipped_total") for m in (a, b)
        ]
        assert all(n is not None and n >= 1 for n in skipped), skipped
        assert sorted(o.key for o in store.list() if not o.key.startswith(CLAIMS)) == sorted(
            [*keys, "notes.txt"]
        )
        for app in apps:
            app.unregister()


@pytest.fixture
def own_seaweed(seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A SeaweedFS of this test's own (stopping it disturbs no other test), with the AWS variables
    pointing at it for this process and the workers it starts."""
    from tests.seaweed import SeaweedServer, weed_binary

    binary = weed_binary()
    assert binary is not None  # the session fixture skipped otherwise
    # a restarted weed waits for its raft election (10 s by default) before it serves
    server = SeaweedServer(binary, ("-master.electionTimeout=1s",))
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server
    finally:
        server.stop()


def test_an_object_store_outage_longer_than_the_old_retries_delays_the_offload_never_loses_it(
    tmp_path: Path, own_seaweed: Any
) -> None:
    # the old worker tried an upload 3 times, each obstore's ~3 s of quick retries, about 10 s in
    # all, then never again: the copies stayed on the workers and wait_offloaded timed out
    url = own_seaweed.new_bucket_url()
    with fault_cluster(2, tmp_path / "cluster", memory_tier_max=0, object_store=url) as cluster:
        own_seaweed.wait_ready()
        with croupier.connect(cluster.master_url) as client:
            client.object_store = url
            app = client.register_app("outage")
            sh = app.register_shuffle(num_mappers=2, num_partitions=3)
            own_seaweed.outage()  # down before the commit
            expected = write_all(sh, 2, 3, 100)
            check_all(sh, expected)  # committed; the uploads are failing
            committed = time.monotonic()
            with pytest.raises(RequestTimeout, match=r"not offloaded within 0.5 s: the object store fails"):
                sh.wait_offloaded(0.5)  # the error says what is pending
            # down longer than the old code's whole retry window (3 attempts of ~3 s, ~10 s)
            time.sleep(max(0.0, 11.0 - (time.monotonic() - committed)))
            own_seaweed.restart()  # same ports, same data
            own_seaweed.wait_ready()
            sh.wait_offloaded(40)
            ids = {cluster.kill_worker(i) for i in range(2)}
            wait_lost(cluster, ids)
            _exactly_once(sh, expected)  # from the store alone
            app.unregister()
