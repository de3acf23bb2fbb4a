"""End to end: the SDK against a master and three workers (fake ones, and the real LocalCluster)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import pytest

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import NotCommitted, UnknownShuffle
from tests.sdk.conftest import HasMasterUrl


def rec(m: int, p: int, i: int, attempt: int = 0) -> bytes:
    return f"m{m}-a{attempt}-p{p}-i{i}".encode()


def test_round_trip_many_mappers_and_partitions(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("e2e")
        sh = app.register_shuffle(num_mappers=4, num_partitions=16)
        expected: dict[int, Counter[bytes]] = {p: Counter() for p in range(16)}
        for m in range(4):
            with sh.writer(map_id=m, attempt_id=0) as w:
                for i in range(300):
                    p = (i * 7 + m) % 16
                    if p == 5:
                        continue  # partition 5 stays empty
                    w.write(p, rec(m, p, i))
                    expected[p][rec(m, p, i)] += 1
            assert w.won is True
        for p in range(16):
            got = list(sh.reader(p))
            assert all(isinstance(r, bytes) for r in got)
            assert Counter(got) == expected[p], p
        assert list(sh.reader(5)) == []
        # views: the same records, as memory views into the fetched chunks; single use too
        reader = sh.reader(3)
        views = list(reader.views())
        assert all(isinstance(v, memoryview) for v in views)
        assert Counter(bytes(v) for v in views) == expected[3]
        with pytest.raises(RuntimeError, match="iterated once"):
            iter(reader)
        app.unregister()


def test_speculative_attempts_only_the_winner_is_read(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("spec")
        sh = app.register_shuffle(num_mappers=2, num_partitions=3)
        with sh.writer(0) as w0:
            for i in range(50):
                w0.write(i % 3, rec(0, i % 3, i))
        loser = sh.writer(1, attempt_id=0)
        for i in range(200):
            loser.write(i % 3, rec(1, i % 3, i, attempt=0))
        with sh.writer(1, attempt_id=1) as winner:
            for i in range(120):
                winner.write(i % 2, rec(1, i % 2, i, attempt=1))
        assert winner.won is True
        assert loser.close() is False and loser.winner == 1
        for p in range(3):
            got = Counter(sh.reader(p))
            want = Counter(rec(0, p, i) for i in range(50) if i % 3 == p)
            want += Counter(rec(1, p, i, attempt=1) for i in range(120) if i % 2 == p)
            assert got == want  # exactly once, and nothing of attempt 0
        app.unregister()


def test_ten_mib_records(cluster: HasMasterUrl, config: ClientConfig) -> None:
    big = [bytes([i]) * (10 * 1024 * 1024 + i) for i in range(2)]
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("big")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        with sh.writer(0) as w:
            w.write(1, big[0])
            w.write(1, b"small")
            w.write(1, big[1])
        got = list(sh.reader(1))
        assert sorted(got, key=len) == [b"small", big[0], big[1]]
        app.unregister()


def test_one_partition(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("one")
        sh = app.register_shuffle(num_mappers=3, num_partitions=1)
        for m in range(3):
            with sh.writer(m) as w:
                for i in range(100):
                    w.write(0, rec(m, 0, i))
                w.write(0, b"")
        got = Counter(sh.reader(0))
        assert got[b""] == 3 and sum(got.values()) == 303
        app.unregister()


def test_thousand_partitions(cluster: HasMasterUrl, config: ClientConfig) -> None:
    # width, not timing: a worker that gives each of its 1,000 locations an actor can take more
    # than the fast config's 3 s to answer a push on a loaded machine (./test runs two suites at once)
    config = dataclasses.replace(config, rpc_timeout=30.0)
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("wide")
        sh = app.register_shuffle(num_mappers=2, num_partitions=1000)
        for m in range(2):
            with sh.writer(m) as w:
                for p in range(0, 1000, 1 + m):
                    w.write(p, rec(m, p, 0))
        for p in (0, 1, 2, 499, 998, 999):
            want = {rec(0, p, 0)} | ({rec(1, p, 0)} if p % 2 == 0 else set())
            assert sorted(sh.reader(p)) == sorted(want)
        total = sum(len(list(sh.reader(p))) for p in range(1000))
        assert total == 1000 + 500
        app.unregister()


def test_open_shuffle_from_another_client(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("producer")
        sh = app.register_shuffle(num_mappers=1, num_partitions=4)
        with croupier.connect(cluster.master_url, config=config) as other:
            same = other.open_shuffle(sh.app_id, sh.shuffle_id)
            assert (same.num_mappers, same.num_partitions) == (1, 4)
            with same.writer(0) as w:
                w.write(2, b"from the other client")
        with croupier.connect(cluster.master_url, config=config) as reader_client:
            got = list(reader_client.open_shuffle(app.app_id, sh.shuffle_id).reader(2))
        assert got == [b"from the other client"]
        with pytest.raises(UnknownShuffle):
            client.open_shuffle(app.app_id, 99)
        app.unregister()


def test_reader_waits_for_commit_then_times_out(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("waiting")
        sh = app.register_shuffle(num_mappers=2, num_partitions=2)
        with sh.writer(0) as w:
            w.write(0, b"x")
        with pytest.raises(NotCommitted, match="1 of 2 maps ended"):
            list(sh.reader(0, timeout=0.3))
        app.unregister()


def test_aborted_writer_does_not_end_its_map(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("abort")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        with pytest.raises(RuntimeError, match="task failed"), sh.writer(0, attempt_id=0) as w:
            w.write(0, b"doomed")
            raise RuntimeError("task failed")
        assert w.closed and w.won is None
        assert sh.summary()["mappers_ended"] == 0
        with pytest.raises(ValueError, match="aborted"):
            w.write(0, b"more")
        with sh.writer(0, attempt_id=1) as retry:
            retry.write(0, b"kept")
        assert list(sh.reader(0)) == [b"kept"]
        app.unregister()


def test_a_loser_pushing_after_the_commit_is_superseded(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        sh = client.register_app("late-loser").register_shuffle(1, 2)
        loser = sh.writer(0, attempt_id=0)
        loser.write(0, b"early")  # buffered only
        with sh.writer(0, attempt_id=1) as winner:
            winner.write(0, b"winner")
        deadline = time.monotonic() + 10
        while not sh.summary()["committed"] and time.monotonic() < deadline:
            time.sleep(0.02)
        for i in range(100):
            loser.write(i % 2, b"late-%d" % i)  # pushes hit committed locations
        loser.write(1, b"ignored once superseded")
        assert loser.close() is False and loser.winner == 1
        assert loser.closed
        assert list(sh.reader(0)) == [b"winner"] and list(sh.reader(1)) == []


def test_a_64_mib_record(cluster: HasMasterUrl, config: ClientConfig) -> None:
    huge = b"\x5a" * (64 * 1024 * 1024)
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("huge")
        sh = app.register_shuffle(num_mappers=1, num_partitions=1)
        with sh.writer(0) as w:
            w.write(0, huge)
        (got,) = list(sh.reader(0))
        assert got == huge
        app.unregister()


def test_readers_read_many_partitions_with_one_locations_call(
    cluster: HasMasterUrl, config: ClientConfig
) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("many")
        sh = app.register_shuffle(num_mappers=3, num_partitions=40)
        expected: dict[int, Counter[bytes]] = {p: Counter() for p in range(40)}
        for m in range(3):
            with sh.writer(m) as w:
                for i in range(400):
                    p = (i * 11 + m) % 40
                    if p % 9 == 4:
                        continue  # some partitions stay empty
                    w.write(p, rec(m, p, i))
                    expected[p][rec(m, p, i)] += 1
        assert Counter(sh.reader(0)) == expected[0]  # committed from here on
        calls: Counter[str] = Counter()
        master_request = client._master.request

        def counting(command: object, reply_type: type) -> object:
            calls[type(command).__name__] += 1
            return master_request(command, reply_type)  # type: ignore[arg-type]

        client._master.request = counting  # type: ignore[method-assign,assignment]
        seen = []
        for reader in sh.readers(range(40)):
            seen.append(reader.partition)
            assert Counter(reader) == expected[reader.partition], reader.partition
        assert seen == list(range(40))
        # one locations call, no per-partition call (AppHeartbeat may tick meanwhile)
        assert calls["GetLocationsBatch"] == 1 and calls["GetLocations"] == 0
        client._master.request = master_request  # type: ignore[method-assign]
        # any order, repeats, no read-ahead or a deep one; readers left unread are harmless
        order = [39, 4, 0, 17, 17, 13, 5]
        for ahead in (0, 1, 10):
            got = {}
            for reader in sh.readers(order, ahead=ahead):
                if reader.partition == 0:
                    continue
                got[reader.partition] = Counter(reader)
            assert got == {p: expected[p] for p in order if p != 0}
        assert list(sh.readers([])) == []
        with pytest.raises(ValueError, match="out of range"):
            sh.readers([3, 40])
        app.unregister()


def test_readers_wait_for_the_commit_then_time_out(cluster: HasMasterUrl, config: ClientConfig) -> None:
    with croupier.connect(cluster.master_url, config=config) as client:
        app = client.register_app("waiting-many")
        sh = app.register_shuffle(num_mappers=2, num_partitions=3)
        with sh.writer(0) as w:
            w.write(0, b"x")
        with pytest.raises(NotCommitted, match="1 of 2 maps ended"):
            next(iter(sh.readers(range(3), timeout=0.3)))
        with sh.writer(1) as w:
            w.write(2, b"y")
        assert [list(r) for r in sh.readers(range(3))] == [[b"x"], [], [b"y"]]
        app.unregister()
