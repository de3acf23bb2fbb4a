"""The master in-process: RPC -> actor -> group commit -> log, restart, liveness."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.config import MasterConfig
from croupier.core.enums import WorkerStatus
from croupier.core.errors import BadRequest, NotEnoughWorkers, Unavailable, UnknownApp, UnknownWorker
from croupier.core.replies import LocationsReply, MapperEndReply, ShuffleSummary, StatusReply
from croupier.ha.eventlog import MemoryEventLog
from croupier.services.master import MasterService
from croupier.transports.master_client import MasterClient
from tests.acking import acking_control_port


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def quiet_config(**kw: float) -> MasterConfig:
    return MasterConfig(sweep_interval=0, takeover_grace=kw.pop("takeover_grace", 0), **kw)  # type: ignore[arg-type]


_ACKING: list[int] = []  # the control port of a worker that acks every RESERVE, while one runs


@pytest.fixture(autouse=True, scope="module")
def _acking_worker() -> Iterator[None]:
    """Every fake worker's control port acks RESERVE at once (tests/acking.py)."""
    with acking_control_port() as port:
        _ACKING.append(port)
        try:
            yield
        finally:
            _ACKING.clear()


def worker_cmd(i: int, inc: str = "inc1") -> c.RegisterWorker:
    control = _ACKING[0] if _ACKING else 1000 + i
    return c.RegisterWorker(f"w{i}", "127.0.0.1", control, 2000 + i, 3000 + i, 4000 + i, 10_000, inc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def master(tmp_path: Path, clock: FakeClock) -> Iterator[MasterService]:
    with MasterService(
        "tcp://127.0.0.1:0", tmp_path / "m", config=quiet_config(), clock=clock, rng=random.Random(1)
    ) as m:
        yield m


@pytest.fixture
def client(master: MasterService) -> Iterator[MasterClient]:
    with MasterClient(master.url, timeout=10) as cl:
        yield cl


def setup_cluster(client: MasterClient, workers: int = 3) -> str:
    for i in range(workers):
        client.call(worker_cmd(i))
    app = client.call(c.RegisterApp("job"))["app_id"]
    assert isinstance(app, str)
    return app


def durable(status: dict[str, object]) -> dict[str, object]:
    return {k: status[k] for k in ("workers", "apps", "shuffles", "seq")}


def test_commands_over_rpc_and_status(client: MasterClient) -> None:
    app = setup_cluster(client)
    sh = client.request(c.RegisterShuffle(app, 2, 8), ShuffleSummary)
    assert sh.shuffle_id == 0 and len(sh.pairs) == 3
    assert sh.workers is not None and set(sh.workers) == {"w0", "w1", "w2"} and sh.revived == ()
    assert client.request(c.MapperEnd(app, 0, 0, 1, 4, "Dw=="), MapperEndReply).won is True
    assert client.request(c.MapperEnd(app, 0, 0, 0, 4, "Dw=="), MapperEndReply).won is False
    loc = client.request(c.GetLocations(app, 0, 5), LocationsReply)
    assert loc.winner_runs == ((0, 1, 1),) and [loc.winners[m] for m in range(2)] == [1, -1]
    assert loc.locations[0].primary.status is WorkerStatus.ACTIVE
    status = client.request(c.Status(), StatusReply)
    assert [w.worker_id for w in status.workers] == ["w0", "w1", "w2"]
    assert status.seq == 6  # 3 workers + app + shuffle + 1 mapper end
    assert status.master is not None and status.master.log == "FileEventLog"
    assert status.master.role == "standalone" and status.master.seq == 6
    assert client.call(c.Status())["master"]["role"] == "standalone"  # the raw JSON, unchecked
    with pytest.raises(UnknownApp):
        client.call(c.RegisterShuffle("nope", 1, 1))


def test_state_survives_a_restart_on_the_same_data_dir(tmp_path: Path, clock: FakeClock) -> None:
    cfg = quiet_config(snapshot_every=4)  # also exercise snapshot + tail on reload
    with (
        MasterService("tcp://127.0.0.1:0", tmp_path / "m", config=cfg, clock=clock) as m1,
        MasterClient(m1.url) as cl,
    ):
        app = setup_cluster(cl)
        for _ in range(3):
            cl.call(c.RegisterShuffle(app, 2, 16))
        cl.call(c.MapperEnd(app, 1, 0, 0, 3, "BwA="))  # partitions 0..2 of 16
        cl.call(c.RevivePartition(app, 1, 3, 0))
        before = cl.call(c.Status())
    assert list((tmp_path / "m").glob("snapshot-*"))
    with (
        MasterService("tcp://127.0.0.1:0", tmp_path / "m", config=cfg, clock=clock) as m2,
        MasterClient(m2.url) as cl,
    ):
        after = cl.call(c.Status())
        assert durable(after) == durable(before)
        # and it keeps going from there
        assert cl.call(c.RegisterShuffle(app, 1, 1))["shuffle_id"] == 3


def test_silent_workers_are_lost_and_silent_apps_expire(
    master: MasterService, client: MasterClient, clock: FakeClock
) -> None:
    app = setup_cluster(client)
    client.call(c.RegisterShuffle(app, 1, 4))
    clock.now += master.config.worker_timeout - 1
    client.call(c.WorkerHeartbeat("w0", "inc1"))
    client.call(c.AppHeartbeat(app))
    clock.now += 2  # w1, w2 are now past the timeout; w0 and the app are not
    master.tick()
    status = _wait_for(client, lambda s: sum(w["status"] == "lost" for w in s["workers"]) == 2)
    assert {w["worker_id"]: w["status"] for w in status["workers"]} == {
        "w0": "active",
        "w1": "lost",
        "w2": "lost",
    }
    with pytest.raises(UnknownWorker):
        client.call(c.WorkerHeartbeat("w1", "inc1"))  # a lost worker must register again
    client.call(worker_cmd(1, "inc2"))
    assert client.call(c.WorkerHeartbeat("w1", "inc2"))["status"] == "active"
    clock.now += master.config.app_timeout + 1
    master.tick()
    _wait_for(client, lambda s: s["apps"] == [])
    with pytest.raises(UnknownApp):
        client.call(c.AppHeartbeat(app))


def test_no_one_is_lost_during_the_takeover_grace(tmp_path: Path, clock: FakeClock) -> None:
    cfg = quiet_config(takeover_grace=300)
    with (
        MasterService("tcp://127.0.0.1:0", tmp_path / "m", config=cfg, clock=clock) as m,
        MasterClient(m.url) as cl,
    ):
        setup_cluster(cl)
        clock.now += cfg.worker_timeout + 1  # past the timeout but inside the grace
        m.tick()
        assert {w["status"] for w in cl.call(c.Status())["workers"]} == {"active"}
        clock.now += 200
        m.tick()
        _wait_for(cl, lambda s: {w["status"] for w in s["workers"]} == {"lost"})


def test_concurrent_mapper_ends_are_group_committed(master: MasterService, client: MasterClient) -> None:
    app = setup_cluster(client)
    client.call(c.RegisterShuffle(app, 400, 4))
    errors: list[BaseException] = []

    def end(start: int) -> None:
        try:
            with MasterClient(master.url) as own:
                for m in range(start, 400, 8):
                    own.call(c.MapperEnd(app, 0, m, 0, 1, "AQ=="))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=end, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    d = master.describe()
    assert d.log_records == 405
    assert (d.log_groups or 0) < d.log_records  # some appends carried several commands
    assert client.call(c.GetShuffle(app, 0))["mappers_ended"] == 400


class FailingLog(MemoryEventLog):
    """A memory log whose appends fail while ``broken`` is set (a full disk, ZooKeeper gone)."""

    broken = False

    def append(self, records: Sequence[bytes]) -> int:
        if self.broken:
            raise OSError(28, "No space left on device")
        return super().append(records)


def test_a_failed_append_is_a_retriable_error_and_nothing_unlogged_is_kept(clock: FakeClock) -> None:
    log = FailingLog()
    with (
        MasterService("tcp://127.0.0.1:0", config=quiet_config(), clock=clock, event_log=log) as m,
        MasterClient(m.url, attempts=1) as cl,
    ):
        app = setup_cluster(cl)
        log.broken = True
        with pytest.raises(Unavailable, match="No space"):
            cl.call(c.RegisterShuffle(app, 1, 4))
        log.broken = False
        # the master reloaded from the log: the failed shuffle does not exist, the next one is 0
        status = _wait_for(cl, lambda s: s["shuffles"] == [])
        assert status["seq"] == log.last_seq()
        assert cl.call(c.RegisterShuffle(app, 1, 4))["shuffle_id"] == 0
    log.close()


def test_bad_commands_get_bad_request(client: MasterClient) -> None:
    with pytest.raises(BadRequest, match="app_id"):
        client.call(c.RegisterShuffle("../../etc", 1, 1))
    with pytest.raises(BadRequest, match="num_partitions"):
        client.call(c.RegisterShuffle("a", 1, 0))
    assert client.call(c.Ping())["pong"] is True


def _wait_for(client: MasterClient, predicate: object, timeout: float = 10.0) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + timeout
    while True:
        status = client.call(c.Status())
        if predicate(status):  # type: ignore[operator]
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met; last status {status}")
        time.sleep(0.02)


def test_a_worker_whose_full_disks_overflow_keeps_getting_slots(client: MasterClient) -> None:
    """Issue 26: full ``dirs`` exclude a worker from placement unless its heartbeat says it
    overflows to an object store; one that stops saying so is excluded again."""
    app = setup_cluster(client, 2)
    full = (("/d", 1, 100, 10, True),)
    client.call(c.WorkerHeartbeat("w0", "inc1", dirs=full))
    client.call(c.WorkerHeartbeat("w1", "inc1", dirs=full, overflow=True))
    sh = client.request(c.RegisterShuffle(app, 1, 4, replicate=False), ShuffleSummary)
    assert {w for pair in sh.pairs for w in pair if w is not None} == {"w1"}
    client.call(c.WorkerHeartbeat("w1", "inc1", dirs=full))
    with pytest.raises(NotEnoughWorkers):
        client.call(c.RegisterShuffle(app, 1, 4, replicate=False))


def test_a_cluster_s_sweep_claim_is_the_same_across_restarts_and_its_own(tmp_path: Path) -> None:
    """The id in a master's object-store sweep claim comes from where its log lives (and the
    secret): a restarted master keeps it, so it never counts its own earlier claim as another
    cluster's; another data dir is another cluster."""
    import uuid

    from croupier.core.sweep import CLAIMS
    from croupier.transports.objstore import open_object_store

    url = f"memory://claims-{uuid.uuid4().hex[:8]}/p"
    store = open_object_store(url)
    config = MasterConfig(object_store=url, orphan_interval=3600, takeover_grace=0.0)

    def claims_after_start(data_dir: Path) -> list[str]:
        with MasterService("tcp://127.0.0.1:0", data_dir, config=config) as master:
            for _ in range(200):  # the first tick after the log loaded writes it
                master.tick()
                if len(store.list(CLAIMS)) > len(before):
                    break
                threading.Event().wait(0.01)
        return sorted(o.key for o in store.list(CLAIMS))

    before: list[str] = []
    first = claims_after_start(tmp_path / "a")
    assert len(first) == 1
    assert claims_after_start(tmp_path / "a") == first  # restarted: the same claim
    before = first
    assert len(claims_after_start(tmp_path / "b")) == 2  # another cluster
