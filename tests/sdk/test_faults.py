"""Failures on the fake cluster: congestion, lost workers, revives, corrupt copies, data loss."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import pytest

import croupier
from croupier._client import Shuffle
from croupier.core.config import ClientConfig
from croupier.core.errors import BadRequest, DataLostError, InternalError, Unavailable
from tests.sdk.fakes import FakeCluster


def write_all(sh: Shuffle, maps: int, per_map: int) -> Counter[bytes]:
    written: Counter[bytes] = Counter()
    for m in range(maps):
        with sh.writer(m) as w:
            for i in range(per_map):
                record = f"m{m}-i{i}".encode() * (1 + i % 5)
                w.write(i % sh.num_partitions, record)
                written[record] += 1
    return written


def read_all(sh: Shuffle) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    for p in range(sh.num_partitions):
        got.update(sh.reader(p))
    return got


def pair_of(sh: Shuffle, partition: int) -> tuple[str, str | None]:
    loc = sh.routing.current(partition)
    return loc.primary.worker_id, loc.replica.worker_id if loc.replica else None


def test_congestion_backs_off_and_loses_nothing(fake: FakeCluster, config: ClientConfig) -> None:
    for worker in fake.workers:
        worker.congest = 4
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("congested").register_shuffle(2, 6)
        written = Counter[bytes]()
        with sh.writer(0) as w:
            for i in range(400):
                w.write(i % 6, b"r%d" % i)
                written[b"r%d" % i] += 1
        assert w.stats["congested"] >= 1 and w.stats["revived"] == 0
        written += write_all(sh, 0, 0)
        with sh.writer(1) as w1:
            w1.write(0, b"last")
        written[b"last"] += 1
        assert read_all(sh) == written


def test_lost_replica_during_writes_is_revived(fake: FakeCluster, config: ClientConfig) -> None:
    cfg = dataclasses.replace(config, rpc_timeout=0.5)  # pushes to the dead worker time out
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("replica-down").register_shuffle(3, 9)
        fake.lose("w1")
        written = write_all(sh, 3, 500)
        moved = [p for p in range(9) if sh.routing.current(p).epoch > 0]
        assert moved and all("w1" not in pair_of(sh, p) for p in moved)
        assert read_all(sh) == written


def test_primary_lost_after_acks_reads_the_replica(fake: FakeCluster, config: ClientConfig) -> None:
    cfg = dataclasses.replace(config, rpc_timeout=0.5)  # pushes to the dead worker time out
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("primary-down").register_shuffle(2, 6)
        written = write_all(sh, 1, 300)  # map 0 acked at epoch 0 on both copies
        victim = pair_of(sh, 0)[0]
        fake.lose(victim)
        with sh.writer(1) as w:
            for i in range(300):
                w.write(i % 6, b"second-%d" % i)
                written[b"second-%d" % i] += 1
        assert w.stats["revived"] >= 1
        assert read_all(sh) == written


def test_crashed_primary_unknown_to_the_master_times_out_then_revives(
    fake: FakeCluster, config: ClientConfig
) -> None:
    cfg = dataclasses.replace(config, rpc_timeout=0.5)
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("timeout").register_shuffle(1, 3)
        victim = pair_of(sh, 0)[0]
        fake.worker(victim).crash()  # the master still thinks it is alive
        with sh.writer(0) as w:
            w.write(0, b"survives")
        assert w.stats["revived"] >= 1
        assert victim not in pair_of(sh, 0)


def test_corrupt_primary_falls_back_to_the_replica(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("corrupt").register_shuffle(2, 3)
        written = write_all(sh, 2, 300)
        victim = pair_of(sh, 0)[0]
        fake.worker(victim).corrupt = True
        reader = sh.reader(0)
        got = Counter(reader)
        assert reader.stats["switches"] == 1
        assert got == Counter({r: n for r, n in written.items() if r in got})
        assert read_all(sh) == written


def test_both_copies_corrupt_is_data_lost(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("all-corrupt").register_shuffle(1, 2)
        write_all(sh, 1, 50)
        for worker in fake.workers:
            worker.corrupt = True
        with pytest.raises(DataLostError) as info:
            list(sh.reader(1))
        primary, replica = pair_of(sh, 1)
        assert info.value.partitions == [1]
        assert info.value.workers == sorted([primary, replica or ""])
        assert "digest mismatch" in info.value.message


def test_unreplicated_copy_lost_before_commit_is_data_lost(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("single").register_shuffle(2, 4, replicate=False)
        assert not sh.replicate
        write_all(sh, 1, 40)
        victim = pair_of(sh, 2)[0]
        fake.lose(victim)
        with sh.writer(1) as w:
            w.write(3 if pair_of(sh, 3)[0] != victim else 2, b"x")
        with pytest.raises(DataLostError) as info:
            list(sh.reader(2))
        assert info.value.partitions == [2] and victim in info.value.workers


def test_gives_up_after_max_revives(fake: FakeCluster, config: ClientConfig) -> None:
    for worker in fake.workers:
        worker.refuse = Unavailable("disk gone")
    cfg = dataclasses.replace(config, max_revives_per_partition=2)
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("doomed").register_shuffle(1, 2)
        w = sh.writer(0)
        with pytest.raises(Unavailable, match="partition 1: pushes failed after 2 revives"):
            w.write(1, b"x")
            w.close()
        assert w.closed and w.won is None
        assert sh.summary()["mappers_ended"] == 0


def test_a_refused_push_raises_and_aborts(fake: FakeCluster, config: ClientConfig) -> None:
    for worker in fake.workers:
        worker.refuse = BadRequest("no thanks")
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("refused").register_shuffle(1, 1)
        with pytest.raises(BadRequest, match="no thanks"), sh.writer(0) as w:
            w.write(0, b"x")
        assert w.closed


def test_heartbeats_run_until_close(fake: FakeCluster, config: ClientConfig) -> None:
    client = croupier.connect(fake.master_url, config=config)
    app = client.register_app("beating")
    deadline = time.monotonic() + 5
    while app.heartbeats < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert app.heartbeats >= 2
    client.close()
    client.close()  # idempotent
    assert client.closed
    with pytest.raises(Unavailable):
        client.register_app("late")


def test_unregister_stops_heartbeats_and_forgets_the_app(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        app = client.register_app("gone", app_id="gone-1")
        assert app.app_id == "gone-1"
        app.unregister()
        app.unregister()  # idempotent
        assert [a["app_id"] for a in client.status()["apps"]] == []


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        ({"pairs": None}, "ShuffleSummary.pairs: expected a list"),
        ({"num_partitions": "8"}, "ShuffleSummary.num_partitions: expected an integer"),
        ({"workers": {"w0": {"status": "active"}}}, "ShuffleSummary.workers.w0: missing field 'worker_id'"),
    ],
)
def test_a_malformed_master_reply_is_a_clear_error(
    fake: FakeCluster, config: ClientConfig, broken: dict[str, object], field: str
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        app = client.register_app("malformed")
        app.register_shuffle(num_mappers=1, num_partitions=8, shuffle_id=0)
        honest = client._master.call

        def tampered(command: object, *, timeout: float | None = None) -> dict[str, object]:
            return {**honest(command, timeout=timeout), **broken}  # type: ignore[arg-type]

        client._master.call = tampered  # type: ignore[method-assign]
        with pytest.raises(InternalError, match="malformed reply from the master to GetShuffle") as raised:
            client.open_shuffle(app.app_id, 0)
        assert field in raised.value.message
        assert isinstance(raised.value, croupier.CroupierError) and not raised.value.retriable
        client._master.call = honest  # type: ignore[method-assign]
        app.unregister()


def read_all_at_once(sh: Shuffle) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    for reader in sh.readers(range(sh.num_partitions)):
        got.update(reader)
    return got


def test_readers_read_ahead_and_still_fall_back_to_the_other_copy(
    fake: FakeCluster, config: ClientConfig
) -> None:
    cfg = dataclasses.replace(config, fetch_timeout=1.0)
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("ahead-corrupt").register_shuffle(2, 6)
        written = write_all(sh, 2, 300)
        victim = pair_of(sh, 0)[0]
        fake.worker(victim).corrupt = True  # the copies read ahead from it are bad
        assert read_all_at_once(sh) == written
        fake.worker(victim).corrupt = False
        fake.worker(victim).crash()  # now they do not answer at all
        assert read_all_at_once(sh) == written


def test_readers_raise_data_lost_for_the_partition_that_lost_both_copies(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("ahead-lost").register_shuffle(1, 3)
        write_all(sh, 1, 60)
        for worker in fake.workers:
            worker.corrupt = True
        it = sh.readers(range(3))
        with pytest.raises(DataLostError) as info:
            list(next(it))
        assert info.value.partitions == [0]


def test_a_worker_that_timed_out_is_read_last_by_the_following_readers(
    fake: FakeCluster, config: ClientConfig
) -> None:
    # long enough that a loaded machine does not make a live worker a suspect
    cfg = dataclasses.replace(config, fetch_timeout=2.0)
    with croupier.connect(fake.master_url, config=cfg) as client:
        sh = client.register_app("suspect").register_shuffle(1, 12)
        written = write_all(sh, 1, 240)
        deadline = time.monotonic() + 20
        while not sh.summary()["committed"] and time.monotonic() < deadline:
            time.sleep(0.02)  # the commit first: it would wait for the dead worker
        victim = pair_of(sh, 0)[0]
        fake.worker(victim).crash()  # the master still thinks it is alive
        on_victim = [p for p in range(12) if pair_of(sh, p)[0] == victim]
        assert len(on_victim) >= 2
        got: Counter[bytes] = Counter()
        switches = []
        for p in range(12):
            reader = sh.reader(p)
            got.update(reader)
            switches.append(reader.stats["switches"])
        assert got == written
        # only the first partition read from the dead primary waited for it
        assert [switches[p] for p in on_victim] == [1] + [0] * (len(on_victim) - 1)
        assert client._suspected(victim)
        assert not any(client._suspected(w.worker_id) for w in fake.workers if w.worker_id != victim)


def test_a_suspicion_expires(fake: FakeCluster, config: ClientConfig) -> None:
    cfg = dataclasses.replace(config, fetch_exclude_seconds=0.2)
    with croupier.connect(fake.master_url, config=cfg) as client:
        client._suspect("w1")
        assert client._suspected("w1")
        time.sleep(0.3)
        assert not client._suspected("w1")
