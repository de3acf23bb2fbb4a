"""Every setting of MasterConfig, WorkerConfig and ClientConfig has an effect.

Each test builds its config with every field away from its default, runs in-process
components with it, and checks each setting where it shows: in behaviour where that is
cheap to see (timeouts, grace, snapshots, slots, chunks, heartbeats), else in the
component that uses it. A new setting fails ``_check_all`` until it gets a check here;
a setting whose effect cannot be observed is a sign that it is dead.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pykka

import croupier
from croupier.actors.flusher import FlusherActor, GetFlushStats
from croupier.actors.partition_actor import PartitionActor
from croupier.core import commands as c
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.core.errors import BadRequest, CroupierError, RequestTimeout
from croupier.core.quotas import parse_tenants
from croupier.core.wire import MsgType
from croupier.dataplane.overflow import OverflowStore
from croupier.ha.eventlog import MemoryEventLog
from croupier.services.master import MasterService
from croupier.services.worker import WorkerService
from croupier.storage.disk import DiskPartitionStore
from croupier.transports.curve import CurveClient, CurveServer
from croupier.transports.master_client import MasterClient
from croupier.transports.objstore import MemoryObjectStore, open_object_store
from croupier.transports.rpc import RpcClient
from croupier.transports.secret import ClusterSecret
from tests.sdk.fakes import fake_cluster

CURVE = CurveServer.from_secret(ClusterSecret(b"curve" * 6 + b"!!"))


def _check_all(config: object, checks: dict[str, Callable[[Any], object]]) -> None:
    """Every field is set away from its default, and every field's check passes."""
    fields = dataclasses.fields(config)  # type: ignore[arg-type]
    assert sorted(checks) == sorted(f.name for f in fields), "a setting has no check here"
    for f in fields:
        assert getattr(config, f.name) != f.default, f"{f.name} is left at its default"
        assert checks[f.name](getattr(config, f.name)), f"{f.name} has no effect"


def _wait(predicate: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _worker(i: int) -> c.RegisterWorker:
    return c.RegisterWorker(f"w{i}", "127.0.0.1", 1000 + i, 2000 + i, 3000 + i, 4000 + i, 100, "inc")


def _statuses(client: MasterClient) -> dict[str, str]:
    return {w["worker_id"]: w["status"] for w in client.call(c.Status())["workers"]}


def test_every_master_setting_takes_effect() -> None:
    config = MasterConfig(
        worker_timeout=20.0,
        app_timeout=40.0,
        sweep_interval=0.0,  # no ticker: this test sweeps by hand, at the times it chooses
        takeover_grace=50.0,
        snapshot_every=3,
        max_group_events=1,
        max_apps=1,
        tenants=parse_tenants('[tenants.team]\ntoken = "team-token-1"'),
        max_shuffles=0,
        max_partitions=10,
        max_bytes_in_flight=1000,
        max_bytes_stored=2000,
        max_peer_reply_bytes=1_000_000,
        object_store="memory://config-effects/master",
        orphan_grace=100.0,
        orphan_interval=30.0,
    )
    objects = open_object_store("memory://config-effects/master")
    assert isinstance(objects, MemoryObjectStore)
    for key, at in (("ghost-old/0/0-0-primary.data", 900.0), ("ghost-new/0/0-0-primary.data", 1000.0)):
        objects.put(key, b"x")  # unknown apps' objects, written at these times of the fake clock
        objects.age(key, time.time() - at)
    clock = FakeClock(1000.0)
    log = MemoryEventLog()
    seen: dict[str, object] = {}
    with (
        MasterService("tcp://127.0.0.1:0", config=config, clock=clock, event_log=log) as master,
        MasterClient(master.url, attempts=1) as client,
    ):
        client.call(_worker(0))
        client.call(_worker(1))
        seen["no token"] = _refused(client, c.RegisterApp("job"))
        app = client.call(c.RegisterApp("job", tenant_token="team-token-1"))["app_id"]
        objects.put(f"{app}/0/0-0-primary.data", b"x")
        seen["second app"] = _refused(client, c.RegisterApp("second", tenant_token="team-token-1"))
        seen["shuffle"] = _refused(client, c.RegisterShuffle(app, 1, 1))
        seen["limits"] = client.call(c.Status())["tenants"]
        clock.now = 1040.0
        client.call(c.WorkerHeartbeat("w1", "inc"))
        client.call(c.AppHeartbeat(app))
        clock.now = 1049.0
        seen["in grace at 1049"] = master.describe().in_grace
        master.tick(1045.0)  # w0 is 45 s silent, but the grace lasts 50 s
        master.describe()  # asked after the tick: the actor has handled it
        seen["1045"] = _statuses(client)
        master.tick(1056.0)  # w0 is 56 s silent, w1 16 s
        # the tick is told, and its WorkerLost commits through the log after it: wait for it
        _wait(lambda: _statuses(client)["w0"] == "lost")
        seen["1056"] = _statuses(client)
        # the first sweep after the grace: ghost-old's object is 156 s old, ghost-new's 56 s
        seen["swept"] = _wait(lambda: objects.size("ghost-old/0/0-0-primary.data") is None)
        master.tick(1081.0)  # w1 41 s silent; the app 41 s; 25 s since the last sweep
        seen["app expired"] = _wait(lambda: client.call(c.Status())["apps"] == [])
        seen["app objects gone"] = _wait(lambda: objects.size(f"{app}/0/0-0-primary.data") is None)
        seen["offload"] = client.call(c.Status()).get("offload")
        janitor = master._front._coordinator.janitor if master._front._coordinator is not None else None
        seen["sweeps"] = janitor.stats()["sweeps"] if janitor is not None else None
        seen["snapshot"] = log.latest_snapshot()
        burst = [threading.Thread(target=_register_many, args=(master.url, k)) for k in range(4)]
        for t in burst:
            t.start()
        for t in burst:
            t.join()
        described = master.describe()
        server = master._front._server
        peer_cap = server.max_peer_reply_bytes if server is not None else None
    log.close()

    def _limit(name: str) -> object:
        rows = {row["tenant"]: row for row in seen["limits"]}  # type: ignore[attr-defined]
        return rows["team"].get(name)

    _check_all(
        config,
        {
            "takeover_grace": lambda _: (
                seen["in grace at 1049"] and seen["1045"] == {"w0": "active", "w1": "active"}
            ),
            "worker_timeout": lambda _: seen["1056"] == {"w0": "lost", "w1": "active"},
            "app_timeout": lambda _: seen["app expired"],
            "sweep_interval": lambda _: _sweeps_by_itself(),
            "snapshot_every": lambda _: seen["snapshot"] is not None,
            # one command's events per group, however many commands wait together
            "max_group_events": lambda _: described.log_groups == (described.log_records or 0) > 40,
            "max_apps": lambda _: seen["second app"] == "QUOTA_EXCEEDED",
            "tenants": lambda _: seen["no token"] == "UNAUTHORIZED",
            # the default quotas apply to a tenant whose file sets none; STATUS shows what applies
            "max_shuffles": lambda v: seen["shuffle"] == "QUOTA_EXCEEDED" and _limit("max_shuffles") == v,
            "max_partitions": lambda v: _limit("max_partitions") == v,
            "max_bytes_in_flight": lambda v: _limit("max_bytes_in_flight") == v,
            "max_bytes_stored": lambda v: _limit("max_bytes_stored") == v,
            "max_peer_reply_bytes": lambda value: peer_cap == value,
            # the master deletes an expired app's objects, and shows the offload
            "object_store": lambda _: seen["app objects gone"] and seen["offload"] is not None,
            "orphan_grace": lambda _: seen["swept"] and objects.size("ghost-new/0/0-0-primary.data") == 1,
            "orphan_interval": lambda _: seen["sweeps"] == 1,
        },
    )
    objects.delete([o.key for o in objects.list()])


def _refused(client: MasterClient, command: c.Command) -> str:
    """The error code the master answers ``command`` with ("" if it accepts it)."""
    try:
        client.call(command)
    except CroupierError as exc:
        return exc.code
    return ""


def _register_many(url: str, k: int) -> None:
    with MasterClient(url, attempts=1) as client:
        for i in range(10):
            client.call(_worker(10 + 10 * k + i))


def _sweeps_by_itself() -> bool:
    """With a ``sweep_interval``, a ticker declares a silent worker lost without ``tick()``."""
    clock = FakeClock(1000.0)
    config = MasterConfig(sweep_interval=0.02, takeover_grace=0.0, worker_timeout=5.0)
    with (
        MasterService("tcp://127.0.0.1:0", config=config, clock=clock) as master,
        MasterClient(master.url, attempts=1) as client,
    ):
        client.call(_worker(0))
        clock.now = 1010.0
        return _wait(lambda: _statuses(client) == {"w0": "lost"})


def test_every_worker_setting_takes_effect(tmp_path: Path, seaweed: Any) -> None:
    bucket = seaweed.new_bucket_url()  # a real S3 server (SeaweedFS), started once per session
    config = WorkerConfig(
        heartbeat_interval=0.1,
        slots=7,
        memory_cap=5_000_000,
        flush_threshold=1024,
        chunk_size=4096,
        replicate_timeout=2.5,
        max_message_bytes=200_000,
        commit_fsync=True,
        partition_actors=2,
        max_peer_reply_bytes=2_000_000,
        throttle_window=60.0,
        throttle_floor=1000,
        throttle_z=2.0,
        split_threshold=20_000,
        memory_tier_max=50_000,
        memory_tier_fraction=0.05,
        disk_reserve=12345,
        object_store=bucket,
        direct_io=False,
    )
    client_config = ClientConfig(push_buffer_size=512, push_merge_size=2048, max_in_flight_per_worker=2)
    with (
        MasterService("tcp://127.0.0.1:0", config=MasterConfig(sweep_interval=0.0)) as master,
        MasterClient(master.url, attempts=1) as admin,
        WorkerService(master.url, [tmp_path / "d0"], config=config) as worker,
    ):
        assert _wait(lambda: admin.call(c.Status())["workers"])
        slots = admin.call(c.Status())["workers"][0]["slots"]
        time.sleep(1.2)
        heartbeat_age = (master.describe().worker_heartbeat_age or {})[worker.worker_id]
        reported_dirs = (master.describe().worker_dirs or {})[
            worker.worker_id
        ]  # path, free, total, reserve, ok
        actors = len(pykka.ActorRegistry.get_by_class(PartitionActor))
        with croupier.connect(master.url, config=client_config) as client:
            shuffle = client.register_app("cfg").register_shuffle(1, 1, replicate=False)
            writer = shuffle.writer(0)
            for i in range(600):
                writer.write(0, bytes([i % 256]) * 100)
            assert writer.close()
            soft_splits = writer.stats["soft_splits"]
            reader = shuffle.reader(0)
            assert sum(1 for _ in reader) == 600
            chunks = reader.stats["chunks"]
            tiered = len(worker.tier)
            client.object_store = bucket
            shuffle.wait_offloaded(60)  # RequestTimeout unless every committed copy is in the bucket
        with RpcClient(worker.urls["control"], timeout=5.0, retries=0) as rpc:
            info = rpc.call(MsgType.WORKER_INFO).body
        flush_writes = sum(
            cast(dict[str, int], f.ask(GetFlushStats()))["writes"]
            for f in pykka.ActorRegistry.get_by_class(FlusherActor)
        )
        with RpcClient(worker.urls["push"], timeout=1.0, retries=0) as rpc:
            small, big = (_error_of(rpc, size) for size in (100_000, 300_000))
        throttle = worker.throttle
        if throttle is not None:
            throttle.evaluate(time.monotonic())
        rates = throttle.rates if throttle is not None else {}
        checks: dict[str, Callable[[Any], object]] = {
            "heartbeat_interval": lambda _: heartbeat_age < 0.8,
            "slots": lambda value: slots == value,
            "memory_cap": lambda value: info["memory_cap"] == value,
            # 60 kB went through: buffers went to disk every 1 kB (dozens of writes); with the
            # 256 KiB default there would be one, at commit
            "flush_threshold": lambda _: flush_writes >= 20,
            "chunk_size": lambda _: chunks >= 10,  # 60 kB in chunks of about 4 KiB
            "replicate_timeout": lambda value: (
                worker._replicator is not None and worker._replicator._timeout == value
            ),
            # a frame under the limit is read (and refused); libzmq drops one over it unread
            "max_message_bytes": lambda _: isinstance(small, BadRequest) and isinstance(big, RequestTimeout),
            # with object_store, the disks are under the overflow (dataplane/overflow.py)
            "direct_io": lambda value: (
                isinstance(worker.store, OverflowStore)
                and isinstance(worker.store.inner, DiskPartitionStore)
                and worker.store.inner.direct is value
            ),
            "commit_fsync": lambda value: (
                isinstance(worker.store, OverflowStore)
                and isinstance(worker.store.inner, DiskPartitionStore)
                and worker.store.inner.fsync is value
            ),
            "partition_actors": lambda value: actors == value,
            # the shuffle's one location (60 kB and headers) is over 50 kB: not kept (1 MiB would keep it)
            # the split threshold (20 kB) cuts the partition into copies under the tier's maximum
            "memory_tier_max": lambda value: worker.tier.max_location == value and tiered > 0,
            "memory_tier_fraction": lambda value: worker.tier.capacity == int(config.memory_cap * value),
            "max_peer_reply_bytes": lambda value: (
                len(worker._servers) == 4
                and all(s.max_peer_reply_bytes == value for s in worker._servers.values())
            ),
            # the shuffle's 60 kB were counted over a 60 s window, against a rule of 1000 B/s and z 2
            "throttle_window": lambda value: throttle is not None and throttle.window == value and rates,
            "throttle_floor": lambda value: throttle is not None and throttle.rule.floor == value,
            "throttle_z": lambda value: throttle is not None and throttle.rule.z == value,
            # 60 kB into one partition: its location passed 20 kB, and the writer moved on
            "split_threshold": lambda value: worker.split.threshold == value and soft_splits >= 1,
            "disk_reserve": lambda value: [d[3] for d in reported_dirs] == [value],
            "object_store": lambda value: worker.offloader is not None and value == bucket,
        }
        _check_all(config, checks)


def _error_of(rpc: RpcClient, size: int) -> CroupierError | None:
    try:
        rpc.call(MsgType.PUSH, {}, [bytes(size)])
    except CroupierError as exc:
        return exc
    return None


def test_every_client_setting_takes_effect() -> None:
    config = ClientConfig(
        rpc_timeout=4.0,
        fetch_timeout=1.5,
        failover_deadline=7.0,
        rpc_retries=2,
        app_heartbeat_interval=0.05,
        push_buffer_size=1000,
        max_in_flight_per_worker=3,
        push_merge_size=5000,
        writer_memory_limit=70_000,
        max_revives_per_partition=2,
        fetch_chunks_in_flight=5,
        fetch_exclude_seconds=33.0,
        commit_wait_timeout=44.0,
        curve_server_key=CURVE.public.decode(),
    )
    with (
        fake_cluster(workers=2, curve=CURVE) as cluster,
        croupier.connect(cluster.master_url, config=config) as client,
    ):
        app = client.register_app("cfg")
        beating = _wait(lambda: app.heartbeats >= 3, timeout=5.0)
        shuffle = app.register_shuffle(1, 2)
        writer = shuffle.writer(0)
        reader = shuffle.reader(0)
        client._suspect("w0")
        suspect_for = client._suspects["w0"] - time.monotonic()
        master = client._master
        accumulator, sender = writer._accumulator, writer._sender
        checks: dict[str, Callable[[Any], object]] = {
            "rpc_timeout": lambda v: master._timeout == v and sender._stall_timeout == v * 2 + 10,
            "fetch_timeout": lambda v: reader._fetch_timeout == v,
            "failover_deadline": lambda v: master._deadline == v,
            "rpc_retries": lambda v: master._attempts == v + 1,
            "app_heartbeat_interval": lambda _: beating,
            "push_buffer_size": lambda v: accumulator.buffer_size == v,
            "max_in_flight_per_worker": lambda v: sender._window == v,
            "push_merge_size": lambda v: sender._merge_size == v,
            "writer_memory_limit": lambda v: accumulator.memory_limit == v,
            "max_revives_per_partition": lambda v: sender._max_revives == v,
            "fetch_chunks_in_flight": lambda v: reader._ahead == v,
            "fetch_exclude_seconds": lambda v: v - 1 < suspect_for <= v,
            "commit_wait_timeout": lambda v: reader._timeout == v,
            # the whole test talks to a CURVE-only cluster: nothing above would have answered
            "curve_server_key": lambda v: master._curve == client._curve == CurveClient.parse(v),
        }
        writer.abort()
        _check_all(config, checks)
