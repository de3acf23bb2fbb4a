"""``readers()`` with FETCH_SMALL on the fake cluster: exactly once, the copy fallback, old workers."""

from __future__ import annotations

from collections import Counter

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import DataLostError
from tests.sdk.fakes import FakeCluster
from tests.sdk.test_faults import pair_of, read_all, write_all


def read_batched(sh: croupier.Shuffle, small_batch: int = 128) -> tuple[Counter[bytes], dict[str, int]]:
    got: Counter[bytes] = Counter()
    stats: Counter[str] = Counter()
    for reader in sh.readers(range(sh.num_partitions), small_batch=small_batch):
        got.update(reader)
        stats.update(reader.stats)
    return got, dict(stats)


def test_readers_fetch_small_partitions_in_one_request_per_worker(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small").register_shuffle(3, 40)
        written = write_all(sh, 3, 400)
        got, stats = read_batched(sh)
        assert got == written
        assert stats["switches"] == 0
        # 40 partitions' first copies in one group: one FETCH_SMALL per worker holding some
        assert sum(w.small_requests for w in fake.workers) <= len(fake.workers)
        assert sum(w.small_requests for w in fake.workers) >= 1


def test_a_bad_digest_in_a_batched_reply_reads_the_other_copy(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small-corrupt").register_shuffle(2, 6)
        written = write_all(sh, 2, 300)
        victim = pair_of(sh, 0)[0]
        fake.worker(victim).corrupt = True
        got, stats = read_batched(sh)
        assert got == written  # each record exactly once, the victim's partitions from their replicas
        assert stats["switches"] == sum(1 for p in range(6) if pair_of(sh, p)[0] == victim)
        assert fake.worker(victim).small_requests >= 1


def test_both_copies_corrupt_in_batched_replies_is_data_lost(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small-all-corrupt").register_shuffle(1, 2)
        write_all(sh, 1, 50)
        for worker in fake.workers:
            worker.corrupt = True
        try:
            read_batched(sh)
        except DataLostError as exc:
            assert "digest mismatch" in exc.message
        else:
            raise AssertionError("both copies are corrupt: the read must fail")


def test_workers_without_fetch_small_are_read_the_usual_way(fake: FakeCluster, config: ClientConfig) -> None:
    for worker in fake.workers:
        worker.small = False
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small-old").register_shuffle(2, 12)
        written = write_all(sh, 2, 300)
        got, stats = read_batched(sh)
        assert got == written
        assert stats["switches"] == 0
        assert read_all(sh) == written


def test_small_batch_zero_sends_no_fetch_small(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small-off").register_shuffle(2, 12)
        written = write_all(sh, 2, 300)
        got, _ = read_batched(sh, small_batch=0)
        assert got == written
        assert sum(w.small_requests for w in fake.workers) == 0


def test_readers_in_any_order_and_skipped_with_small_batches(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("small-order").register_shuffle(2, 30)
        write_all(sh, 2, 300)
        expected = {p: Counter(sh.reader(p)) for p in range(30)}
        order = [29, 3, 3, 0, 17, *range(5, 12)]
        for batch in (1, 2, 7, 300):
            for i, reader in enumerate(sh.readers(order, small_batch=batch)):
                if i % 3 == 1:
                    continue  # never iterated: its batched entry is dropped
                assert Counter(reader) == expected[order[i]]
