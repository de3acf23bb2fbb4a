"""Fault scenarios on a containerised cluster: 3 ZooKeeper nodes, 3 masters, 3 workers.

Every scenario pushes a known set of records through the SDK from this process and reads
every partition back, checking each record exactly once (a ``Counter`` per partition),
while one fault is injected with Docker: ``kill``, ``pause``, ``stop`` and ``start``.
Each prints one line, ``[containers] <scenario>: <records> records ... in <seconds> s``,
for the closing notes. One scenario runs SeaweedFS in a container of its own as the object
store (issue 26) and kills every worker container once the shuffle is offloaded.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import croupier
from croupier.core.commands import GetLocations
from croupier.core.config import ClientConfig
from croupier.core.errors import CroupierError, Unavailable
from croupier.transports.objstore import open_object_store
from integration.containers.cluster import ContainerCluster

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(400)]

CONFIG = ClientConfig(failover_deadline=60.0, rpc_timeout=10.0, fetch_timeout=5.0)


def records(m: int, partitions: list[int], n: int, size: int) -> list[tuple[int, bytes]]:
    """Map ``m``'s records over ``partitions``: distinct, of varied length around ``size`` bytes."""
    return [
        (partitions[i % len(partitions)], f"m{m}-r{i}-".encode().ljust(size + (i % 13) * 7, b"x"))
        for i in range(n)
    ]


class Job:
    """One shuffle of ``mappers`` x ``per_map`` records into ``partitions`` partitions."""

    def __init__(
        self,
        client: croupier.Client,
        name: str,
        *,
        mappers: int = 6,
        partitions: int = 8,
        per_map: int = 2000,
        size: int = 200,
    ) -> None:
        self.client = client
        self.mappers, self.partitions, self.per_map, self.size = mappers, partitions, per_map, size
        self.app = client.register_app(name)
        self.shuffle: croupier.Shuffle = self.app.register_shuffle(
            num_mappers=mappers, num_partitions=partitions
        )
        self.errors: list[BaseException] = []
        # map -> the partitions it writes to (default: all)
        self.targets: dict[int, list[int]] = {}

    @property
    def total(self) -> int:
        return self.mappers * self.per_map

    def write(
        self, maps: range, *, halfway: threading.Event | None = None, resume: threading.Event | None = None
    ) -> None:
        """Run the maps in ``maps`` in parallel threads (one client each); wait for them.

        With ``halfway``, each map sets it halfway through its records, then waits for
        ``resume`` (if given) before writing the rest.
        """

        def run(m: int) -> None:
            try:
                with croupier.connect(self.client.url, config=CONFIG) as own:
                    shuffle = own.open_shuffle(self.shuffle.handle())
                    with shuffle.writer(m, 0) as w:
                        for i, (p, rec) in enumerate(self.records(m)):
                            w.write(p, rec)
                            if halfway is not None and i == self.per_map // 2:
                                halfway.set()
                                if resume is not None:
                                    resume.wait(120)
            except BaseException as exc:
                self.errors.append(exc)

        threads = [threading.Thread(target=run, args=(m,), name=f"map-{m}") for m in maps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not self.errors, self.errors

    def records(self, m: int) -> list[tuple[int, bytes]]:
        return records(m, self.targets.get(m, list(range(self.partitions))), self.per_map, self.size)

    def expected(self, p: int) -> Counter[bytes]:
        return Counter(rec for m in range(self.mappers) for q, rec in self.records(m) if q == p)

    def verify(
        self, partitions: range | None = None, *, after_first: Callable[[], None] | None = None
    ) -> int:
        """Read every partition; each record must come back exactly once. Returns the count."""
        checked = 0
        for p in partitions if partitions is not None else range(self.partitions):
            got: Counter[bytes] = Counter()
            for rec in self.shuffle.reader(p):
                got[rec] += 1
                if after_first is not None:
                    after_first()
                    after_first = None
            assert got == self.expected(p), f"partition {p}: {_diff(got, self.expected(p))}"
            checked += sum(got.values())
        return checked

    def workers_of(self, p: int) -> set[str]:
        reply = self.client._master.call(GetLocations(self.shuffle.app_id, self.shuffle.shuffle_id, p))
        return {
            addr["worker_id"]
            for loc in reply["locations"]
            for addr in (loc["primary"], loc["replica"])
            if addr is not None
        }


def _diff(got: Counter[bytes], want: Counter[bytes]) -> str:
    missing = sum((want - got).values())
    extra = sum((got - want).values())
    return f"{missing} records missing, {extra} extra or duplicated (of {sum(want.values())})"


@contextmanager
def scenario(name: str, capsys: pytest.CaptureFixture[str]) -> Iterator[dict[str, object]]:
    """Time the scenario and print its line; the body fills in ``records`` and extras."""
    facts: dict[str, object] = {}
    began = time.monotonic()
    yield facts
    took = time.monotonic() - began
    extra = "".join(f", {k} {v}" for k, v in facts.items() if k != "records")
    with capsys.disabled():
        checked = facts.get("records", 0)
        print(f"\n[containers] {name}: {checked} records verified exactly once in {took:.1f} s{extra}")


def _connect(cluster: ContainerCluster, config: ClientConfig = CONFIG) -> croupier.Client:
    return croupier.connect(cluster.master_url, config=config)


def test_worker_killed_during_push(cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    with scenario("docker kill a worker during push", capsys) as facts, _connect(cluster) as client:
        job = Job(client, "kill-during-push")
        job.write(range(0, 2))
        halfway, resume = threading.Event(), threading.Event()
        victim = cluster.workers[0]

        def kill_when_halfway() -> None:
            halfway.wait(120)
            try:
                cluster.kill(victim)
            finally:
                resume.set()

        killer = threading.Thread(target=kill_when_halfway, name="killer")
        killer.start()
        job.write(range(2, job.mappers), halfway=halfway, resume=resume)
        killer.join()
        assert "killed" in victim.notes
        facts["records"] = job.verify()
        # the maps' pushes to the dead worker failed over to new locations
        facts["revived partitions"] = job.shuffle.summary()["revived_partitions"]
        assert facts["revived partitions"], "no partition was revived: the kill missed the pushes"
        cluster.wait_workers("lost", [victim])


def test_worker_killed_during_commit(cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    with scenario("docker kill a worker during commit", capsys) as facts, _connect(cluster) as client:
        job = Job(client, "kill-during-commit")
        job.write(range(0, job.mappers - 1))
        victim = cluster.workers[1]
        vid = cluster.worker_id(victim)
        # The last map writes only where the victim holds no copy, so it can end while the
        # victim is frozen; its MapperEnd starts the commit, whose COMMIT_FILES to the
        # victim cannot be answered. The victim is killed while that commit waits.
        job.targets[job.mappers - 1] = [p for p in range(job.partitions) if vid not in job.workers_of(p)]
        assert job.targets[job.mappers - 1], "every partition has a copy on the victim"
        cluster.pause(victim)
        job.write(range(job.mappers - 1, job.mappers))
        assert not job.shuffle.summary()["committed"]
        cluster.kill(victim)
        facts["records"] = job.verify()
        summary = job.shuffle.summary()
        assert summary["committed"], summary
        assert summary["lost_partitions"] == [], summary
        failed = [
            (p, w)
            for p in range(job.partitions)
            for _, w in client._master.call(GetLocations(job.shuffle.app_id, job.shuffle.shuffle_id, p))[
                "failed_copies"
            ]
        ]
        # every copy the victim held failed at commit; the other copies were read
        assert failed and {w for _, w in failed} == {vid}, failed
        facts["copies failed at commit"] = len(failed)


def test_worker_killed_during_read(cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    with scenario("docker kill a worker during read", capsys) as facts, _connect(cluster) as client:
        # about 10 MiB per partition: each location has two chunks, the kill lands between them
        job = Job(client, "kill-during-read", mappers=4, partitions=4, per_map=10000, size=1000)
        job.write(range(job.mappers))
        by_id = {cluster.worker_id(w): w for w in cluster.workers}
        victim = by_id[sorted(job.workers_of(0))[0]]
        facts["records"] = job.verify(after_first=lambda: cluster.kill(victim))
        assert "killed" in victim.notes


def test_leader_master_killed_during_a_shuffle(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        scenario("docker kill the leader master during a shuffle", capsys) as facts,
        _connect(cluster) as client,
    ):
        job = Job(client, "kill-the-leader")
        job.write(range(0, 3))
        leader = cluster.wait_leader()
        term = cluster.status()["term"]  # type: ignore[index]
        halfway, resume = threading.Event(), threading.Event()
        failover: list[float] = []

        def kill_when_halfway() -> None:
            # maps 3.. are halfway through their pushes; they end (MapperEnd) after the kill
            halfway.wait(120)
            try:
                killed_at = time.monotonic()
                cluster.kill(leader)
            finally:
                resume.set()
            cluster.ping()
            failover.append(time.monotonic() - killed_at)

        killer = threading.Thread(target=kill_when_halfway, name="killer")
        killer.start()
        job.write(range(3, job.mappers), halfway=halfway, resume=resume)
        killer.join()
        facts["failover s"] = round(failover[0], 2)
        facts["records"] = job.verify()
        new = cluster.wait_leader()
        assert new is not leader
        assert cluster.status()["term"] > term  # type: ignore[index]


@pytest.mark.cluster(worker_timeout=6.0)
def test_worker_paused_past_the_heartbeat_timeout(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        scenario("docker pause a worker past the heartbeat timeout", capsys) as facts,
        _connect(cluster) as client,
    ):
        before = Job(client, "before-pause")
        before.write(range(before.mappers))
        victim = cluster.workers[2]
        cluster.pause(victim)
        try:
            cluster.wait_workers("lost", [victim])
            # a shuffle registered now is placed on the two live workers only
            during = Job(client, "during-pause")
            placed = set().union(*(during.workers_of(p) for p in range(during.partitions)))
            assert cluster.worker_id(victim) not in placed, placed
            during.write(range(during.mappers))
            checked = during.verify()
        finally:
            cluster.unpause(victim)
        cluster.wait_workers("active", [victim])
        checked += before.verify() + during.verify()
        # and the re-admitted worker takes new work again
        after = Job(client, "after-pause", partitions=12)
        placed = set().union(*(after.workers_of(p) for p in range(after.partitions)))
        assert cluster.worker_id(victim) in placed, placed
        after.write(range(after.mappers))
        facts["records"] = checked + after.verify()


def test_one_zookeeper_node_of_three_stopped(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with scenario("docker stop 1 of 3 ZooKeeper nodes", capsys) as facts, _connect(cluster) as client:
        job = Job(client, "one-zk-down")
        job.write(range(0, 3))
        leader = cluster.wait_leader()
        term = cluster.status()["term"]  # type: ignore[index]
        follower = next(n for n in cluster.zookeepers if cluster.zk_mode(n) == "follower")
        cluster.stop_node(follower)
        job.write(range(3, job.mappers))
        facts["records"] = job.verify()
        # no interruption: the same master leads in the same term
        assert cluster.leader() is leader
        assert cluster.status()["term"] == term  # type: ignore[index]
        cluster.start_again(follower)
        cluster.wait_zookeeper()


def test_two_zookeeper_nodes_of_three_stopped(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        scenario("docker stop 2 of 3 ZooKeeper nodes, then start them", capsys) as facts,
        _connect(cluster) as client,
    ):
        before = Job(client, "before-quorum-loss")
        before.write(range(before.mappers))
        down = cluster.zookeepers[:2]
        for node in down:
            cluster.stop_node(node)
        # writes fail clearly, within the client's deadline
        impatient = ClientConfig(failover_deadline=10.0, rpc_timeout=3.0)
        with _connect(cluster, impatient) as other, pytest.raises(CroupierError) as refused:
            other.register_app("no-quorum")
        assert isinstance(refused.value, Unavailable) or refused.value.retriable, repr(refused.value)
        facts["refused with"] = type(refused.value).__name__
        for node in down:
            cluster.start_again(node)
        cluster.wait_healthy()
        after = Job(client, "after-quorum-loss")
        after.write(range(after.mappers))
        facts["records"] = before.verify() + after.verify()


def test_worker_container_restarted_on_its_data_directory(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        scenario("restart a worker container on the same data directory", capsys) as facts,
        _connect(cluster) as client,
    ):
        job = Job(client, "restart-worker")
        job.write(range(job.mappers))
        restarted, other = cluster.workers[0], cluster.workers[1]
        cluster.restart(restarted)
        # with the other copy-holder of each of its partitions gone, only the restarted
        # worker can serve them: every record read back comes from its committed files
        cluster.kill(other)
        served_by_restarted = [
            p for p in range(job.partitions) if cluster.worker_id(restarted) in job.workers_of(p)
        ]
        assert served_by_restarted
        facts["records"] = job.verify()
        facts["partitions with a copy on it"] = len(served_by_restarted)


@pytest.mark.cluster(zk_nodes=1, masters=1, worker_timeout=3.0, object_store=True)
def test_every_worker_container_killed_after_the_offload_to_a_seaweedfs_container(
    cluster: ContainerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    seaweedfs, url = cluster.seaweedfs, cluster.object_store_url
    assert seaweedfs is not None and url is not None
    with (
        scenario("docker kill every worker after the offload to a SeaweedFS container", capsys) as facts,
        _connect(cluster) as client,
    ):
        client.object_store = url  # this process reads the store as the containers write it
        job = Job(client, "scale-to-zero")
        job.write(range(job.mappers - 1))
        # SeaweedFS frozen: the offload that the commit starts is held mid-way
        cluster.pause(seaweedfs)
        try:
            job.write(range(job.mappers - 1, job.mappers))  # its MapperEnd starts the commit
            deadline = time.monotonic() + 30  # the commit runs after the ack (COMMIT_FILES, then logged)
            while not job.shuffle.summary()["committed"]:
                assert time.monotonic() < deadline, "the shuffle did not commit in 30 s"
                time.sleep(0.1)
            time.sleep(1.0)
            held = cluster.status()["offload"]  # type: ignore[index]
            assert held["committed_copies"] > 0 and held["offloaded_copies"] == 0, held
        finally:
            cluster.unpause(seaweedfs)
        # ... and resumes once the store answers again: one object copy of every partition
        # (what wait_offloaded waits for), then both copies of each (none failed for good)
        job.shuffle.wait_offloaded(60)
        _wait_offload_done(cluster, held["committed_copies"])
        facts["copies offloaded"] = held["committed_copies"]
        for worker in cluster.workers:
            cluster.kill(worker)
        cluster.wait_workers("lost", cluster.workers)
        # no worker is left: every record comes from the SeaweedFS container
        facts["records"] = job.verify()
        store = open_object_store(url)
        try:
            prefix = f"{job.shuffle.app_id}/"
            data = [o for o in store.list(prefix) if o.key.endswith(".data")]
            assert len(data) >= job.partitions, data
            # the master (given --object-store too) deletes the objects with no worker left
            job.app.unregister()
            deadline = time.monotonic() + 30
            while store.list(prefix) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert store.list(prefix) == []
        finally:
            store.close()


def _wait_offload_done(cluster: ContainerCluster, copies: int, timeout: float = 60.0) -> None:
    """Until the leader's STATUS shows all ``copies`` committed copies offloaded."""
    deadline = time.monotonic() + timeout
    while True:
        offload = cluster.status()["offload"]  # type: ignore[index]
        if offload["pending_copies"] == 0:
            assert offload["offloaded_copies"] == offload["committed_copies"] == copies, offload
            return
        assert time.monotonic() < deadline, f"not all offloaded in {timeout} s: {offload}"
        time.sleep(0.2)
