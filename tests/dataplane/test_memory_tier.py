"""The small-partition memory tier (issue 15 item 4) and FETCH_SMALL, on real workers."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import croupier
from croupier.core.config import ClientConfig, WorkerConfig
from croupier.core.errors import BadRequest, StaleLocation
from croupier.core.wire import MsgType
from croupier.services.local import LocalCluster
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.memory_tier import MemoryTier
from croupier.storage.store import LocationKey
from croupier.transports.rpc import RpcClient

CONFIG = ClientConfig(rpc_timeout=3.0, commit_wait_timeout=30.0, fetch_timeout=5.0)


def _wait(predicate: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _key(partition: int, shuffle: int = 0, app: str = "a") -> LocationKey:
    return LocationKey(app, shuffle, partition, 0, "primary")


# -- the tier alone ------------------------------------------------------------------------------
def test_tier_keeps_small_locations_within_its_capacity_and_the_memory_cap() -> None:
    limiter = MemoryLimiter(100_000)
    tier = MemoryTier(1000, 2500, limiter)
    assert tier.admit(_key(0), b"x" * 1000)
    assert not tier.admit(_key(1), b"x" * 1001)  # over the per-location maximum
    assert tier.admit(_key(2), b"y" * 1000)
    assert not tier.admit(_key(3), b"z" * 600)  # 2600 > the tier's capacity
    assert tier.admit(_key(4), b"z" * 500)
    assert tier.used == 2500 and len(tier) == 3
    assert limiter.held == 2500  # counted against the cap as held state
    assert tier.read(_key(2), 10, 5) == b"yyyyy"
    assert tier.read(_key(2), 999, 5) is None  # out of range: read from disk
    assert tier.read(_key(1), 0, 1) is None
    assert tier.hits == 2
    assert tier.evict("a", 0) == 3
    assert tier.used == 0 and limiter.held == 0


def test_tier_takes_nothing_past_the_held_share_of_the_cap() -> None:
    limiter = MemoryLimiter(10_000)  # held state may take half: 5000 bytes
    tier = MemoryTier(4000, 100_000, limiter)
    assert tier.admit(_key(0), b"x" * 4000)
    assert not tier.admit(_key(1), b"x" * 2000)
    assert limiter.held == 4000
    assert limiter.congested == 0  # a full tier is no congested push
    tier.clear()
    assert limiter.held == 0


def test_tier_off() -> None:
    for tier in (MemoryTier(0, 1000), MemoryTier(1000, 0)):
        assert not tier.enabled
        assert not tier.admit(_key(0), b"x")


def test_evict_scopes_by_shuffle_and_app() -> None:
    tier = MemoryTier(100, 10_000)
    for app, shuffle in (("a", 0), ("a", 1), ("b", 0)):
        tier.admit(_key(0, shuffle, app), b"x" * 10)
    assert tier.evict("a", 1) == 1
    assert tier.evict("a") == 1
    assert len(tier) == 1 and _key(0, 0, "b") in tier


# -- on a worker ---------------------------------------------------------------------------------
@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalCluster]:
    config = WorkerConfig(heartbeat_interval=1.0, chunk_size=64 * 1024)
    with LocalCluster(workers=1, base_dir=tmp_path, worker_config=config) as lc:
        yield lc


def _write(sh: croupier.Shuffle, sizes: list[int]) -> dict[int, Counter[bytes]]:
    """Partition p gets records of 1000 bytes (the last shorter) adding up to ``sizes[p]``."""
    written: dict[int, Counter[bytes]] = {}
    with sh.writer(0) as w:
        for p, size in enumerate(sizes):
            written[p] = Counter()
            for i, at in enumerate(range(0, size, 1000)):
                record = bytes([p % 251, i % 251]) * (min(1000, size - at) // 2)
                w.write(p, record)
                written[p][record] += 1
    return written


def test_small_partitions_are_served_from_memory_even_with_their_files_gone(local: LocalCluster) -> None:
    worker = local.workers[0]
    with croupier.connect(local.master_url, config=CONFIG) as client:
        sh = client.register_app("tier").register_shuffle(1, 20, replicate=False)
        written = _write(sh, [3000] * 20)
        held = worker.limiter.held
        sh.summary()
        assert _wait(lambda: sh._summary().committed)
        assert _wait(lambda: len(worker.tier) == 20)  # admitted at commit, before the reply
        assert worker.limiter.held >= held + worker.tier.used
        for data in Path(local.base_dir).rglob("*.data"):
            data.unlink()  # the files are still written; the tier serves without them
        assert {p: Counter(r) for p, r in enumerate(sh.readers(range(20)))} == written
        assert {p: Counter(sh.reader(p)) for p in range(20)} == written
        assert worker.tier.hits >= 40
        sh.unregister()
        assert _wait(lambda: len(worker.tier) == 0 and worker.tier.used == 0)


def test_tier_respects_its_fraction_and_maximum(tmp_path: Path) -> None:
    config = WorkerConfig(
        heartbeat_interval=1.0, memory_cap=1_000_000, memory_tier_max=20_000, memory_tier_fraction=0.05
    )
    with (
        LocalCluster(workers=1, base_dir=tmp_path, worker_config=config) as lc,
        croupier.connect(lc.master_url, config=CONFIG) as client,
    ):
        worker = lc.workers[0]
        sh = client.register_app("fraction").register_shuffle(1, 30, replicate=False)
        sizes = [9000] * 25 + [30_000] * 5  # the last five over the maximum
        written = _write(sh, sizes)
        got = {p: Counter(r) for p, r in enumerate(sh.readers(range(30)))}
        assert got == written
        assert worker.tier.capacity == 50_000
        assert 0 < worker.tier.used <= 50_000
        assert len(worker.tier) == 5  # 9 kB and headers each: five fit in 50 kB
        kept = [LocationKey(sh.app_id, sh.shuffle_id, p, 0, "primary") in worker.tier for p in range(30)]
        assert sum(kept[:25]) == 5 and not any(kept[25:])


def test_fetch_small_returns_what_the_usual_path_does(local: LocalCluster) -> None:
    """Sizes around the 1 MiB per-location and 4 MiB per-reply limits: the batched reads
    (a location whole, or skipped and read as usual) yield what chunk by chunk does."""
    with croupier.connect(local.master_url, config=CONFIG) as client:
        app = client.register_app("same")
        sizes_of = st.lists(
            st.one_of(st.integers(0, 5000), st.integers(900_000, 1_200_000)), min_size=1, max_size=8
        )

        @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
        @given(sizes=sizes_of)
        def check(sizes: list[int]) -> None:
            sh = app.register_shuffle(1, len(sizes), replicate=False)
            written = _write(sh, sizes)
            batched = [Counter(r) for r in sh.readers(range(len(sizes)))]
            usual = [Counter(r) for r in sh.readers(range(len(sizes)), small_batch=0)]
            assert batched == usual == [written[p] for p in range(len(sizes))]
            sh.unregister()

        check()


def test_orphan_sweep_evicts_the_tier(local: LocalCluster) -> None:
    worker = local.workers[0]
    with croupier.connect(local.master_url, config=CONFIG) as client:
        sh = client.register_app("orphan").register_shuffle(1, 4, replicate=False)
        _write(sh, [2000] * 4)
        assert [sum(1 for _ in r) for r in sh.readers(range(4))] == [2] * 4
        assert len(worker.tier) == 4
        held = worker.limiter.held
        assert worker._control is not None
        worker._control.drop_orphan(sh.app_id, sh.shuffle_id)
        assert _wait(lambda: len(worker.tier) == 0)
        assert worker.limiter.held <= held - 4 * 2000


def test_fetch_small_on_the_wire(local: LocalCluster) -> None:
    """Entries in order; an unknown location is answered in its entry; whole-request errors."""
    worker = local.workers[0]
    with croupier.connect(local.master_url, config=CONFIG) as client:
        sh = client.register_app("wire").register_shuffle(1, 3, replicate=False)
        _write(sh, [2000, 0, 3000])  # partition 1 is empty: no location
        list(sh.reader(0))
        body = {
            "app_id": sh.app_id,
            "shuffle_id": sh.shuffle_id,
            "incarnation": worker.incarnation,
            "locations": [[2, 0, "primary"], [1, 0, "primary"], [0, 0, "primary"]],
        }
        with RpcClient(worker.urls["fetch"], timeout=5.0, retries=0) as rpc:
            reply = rpc.call(MsgType.FETCH_SMALL, body)
            statuses = [e["status"] for e in reply.body["locations"]]
            assert statuses == ["ok", "UNKNOWN_SHUFFLE", "ok"]
            assert [len(p) for p in reply.payloads] == [
                e["bytes"] for e in reply.body["locations"] if "bytes" in e
            ]
            assert reply.body["locations"][0]["batches"] >= 1
            with pytest.raises(StaleLocation):
                rpc.call(MsgType.FETCH_SMALL, {**body, "incarnation": "0" * 16})
            with pytest.raises(BadRequest):
                rpc.call(MsgType.FETCH_SMALL, {**body, "locations": [[0, 0, "primary"]] * 257})


def test_a_bad_digest_from_fetch_small_reads_the_replica(tmp_path: Path) -> None:
    """Real workers, tier off (the payload comes from the damaged file): the damaged copy's
    partition is read from its replica, every record exactly once."""
    config = WorkerConfig(heartbeat_interval=1.0, memory_tier_max=0)
    with (
        LocalCluster(workers=2, base_dir=tmp_path, worker_config=config) as lc,
        croupier.connect(lc.master_url, config=CONFIG) as client,
    ):
        sh = client.register_app("damaged").register_shuffle(1, 6)
        written = _write(sh, [3000] * 6)
        assert _wait(lambda: sh._summary().committed)
        [damaged] = Path(tmp_path).rglob(f"{sh.app_id}/{sh.shuffle_id}/0-0-primary.data")
        raw = bytearray(damaged.read_bytes())
        raw[-1] ^= 0xFF  # the last record's last byte
        with open(damaged, "r+b") as fh:
            fh.write(raw)

        def fetches() -> int:
            return sum(w._servers["fetch"].stats.requests for w in lc.workers)

        before = fetches()
        readers = list(sh.readers(range(6)))
        got = {p: Counter(r) for p, r in enumerate(readers)}
        assert got == written
        assert [r.stats["switches"] for r in readers] == [1, 0, 0, 0, 0, 0]
        # a FETCH_SMALL per worker, then OPEN_STREAM and FETCH_CHUNK 0 of the replica; not 2 per copy
        assert fetches() - before <= 4


def test_fetch_small_skips_what_is_over_its_limits(local: LocalCluster) -> None:
    """Over 1 MiB, or past 4 MiB of payloads in one reply: read chunk by chunk (64 KiB here)."""
    sizes = [5000, 1_200_000, *[900_000] * 5]
    with croupier.connect(local.master_url, config=CONFIG) as client:
        sh = client.register_app("limits").register_shuffle(1, len(sizes), replicate=False)
        written = _write(sh, sizes)
        readers = list(sh.readers(range(len(sizes))))
        assert [Counter(r) for r in readers] == [written[p] for p in range(len(sizes))]
        chunks = [r.stats["chunks"] for r in readers]
        # whole in the reply: 5 kB, then four of 0.9 MB (3.6 MB); the fifth would pass 4 MiB
        assert chunks[0] == 1 and chunks[2:6] == [1, 1, 1, 1]
        assert chunks[1] > 1 and chunks[6] > 1


def test_skipped_locations_are_fetched_ahead_the_usual_way(local: LocalCluster) -> None:
    sizes = [5000, 1_200_000, 1_200_000, 1_200_000]
    with croupier.connect(local.master_url, config=CONFIG) as client:
        sh = client.register_app("ahead").register_shuffle(1, len(sizes), replicate=False)
        written = _write(sh, sizes)
        it = iter(sh.readers(range(len(sizes))))
        first = next(it)
        assert Counter(first) == written[0]  # its FETCH_SMALL reply is in: the others were skipped
        second = next(it)  # as it is handed out, the next ones are prepared
        third = next(it)
        # its first copy was skipped: asked for with OPEN_STREAM and chunk 0 before its turn
        assert third._ahead_small is None and third._ahead_open is not None
        assert Counter(second) == written[1] and Counter(third) == written[2]
        assert [Counter(r) for r in it] == [written[3]]
