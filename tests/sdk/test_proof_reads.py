"""The reader proves a partition complete: copies add up, a doubtful copy is replaced by the
other one, and only what no copy holds is reported lost, by (map, partition)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import croupier
from croupier._accumulator import make_batch
from croupier._client import Shuffle
from croupier._reader import Reader
from croupier.core.commands import GetLocations
from croupier.core.config import ClientConfig
from croupier.core.errors import DataLostError, error_from_wire
from croupier.core.replies import LocationsReply
from tests.sdk.fakes import FakeCluster
from tests.sdk.test_faults import pair_of, read_all, write_all

Ranges = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Declared(LocationsReply):
    """A locations reply with the declared maps (issue 12, interface 3), whatever the master sends."""

    maps: Ranges | None = None
    lost_maps: Ranges | None = None


def declared(sh: Shuffle, partition: int, maps: Ranges, **changes: object) -> Declared:
    reply = sh.client._master.request(GetLocations(sh.app_id, sh.shuffle_id, partition), LocationsReply)
    assert reply.committed
    fields = {f.name: getattr(reply, f.name) for f in dataclasses.fields(LocationsReply)}
    return Declared(**{**fields, "maps": maps, **changes})


def records_of(sh: Shuffle, partition: int, reply: LocationsReply | None = None) -> Counter[bytes]:
    return Counter(Reader(sh, partition, _locations=reply))


def written_to(written: Counter[bytes], sh: Shuffle, partition: int) -> Counter[bytes]:
    """What write_all sent to ``partition`` (record i of a map went to i % num_partitions)."""
    return Counter(
        {
            r: n
            for r, n in written.items()
            if int(r.split(b"-i")[1].split(b"m")[0]) % sh.num_partitions == partition
        }
    )


def forget(fake: FakeCluster, sh: Shuffle, partition: int, role: str) -> None:
    """The worker holding ``role`` of ``partition`` no longer knows it (lost or damaged files)."""
    primary, replica = pair_of(sh, partition)
    worker = fake.worker(primary if role == "primary" else replica or "")
    key = (sh.app_id, sh.shuffle_id, partition, 0, role)
    with worker.lock:
        worker.chunks.pop(key)
        worker.data.pop(key)


def test_a_copy_its_worker_does_not_know_is_read_from_the_other_copy(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("unknown-copy").register_shuffle(2, 3)
        written = write_all(sh, 2, 150)
        assert read_all(sh) == written
        forget(fake, sh, 1, "primary")
        reader = sh.reader(1)
        assert Counter(reader) == written_to(written, sh, 1)
        assert reader.stats["switches"] == 1


def test_a_copy_that_fails_the_proof_is_completed_from_the_other_copy_each_record_once(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("short-copy").register_shuffle(2, 2)
        written = write_all(sh, 2, 200)
        assert read_all(sh) == written
        primary = fake.worker(pair_of(sh, 0)[0])
        key = (sh.app_id, sh.shuffle_id, 0, 0, "primary")
        with primary.lock:
            assert len(primary.chunks[key]) > 2
            del primary.chunks[key][1]  # a middle chunk is gone; the copy still reads through
        assert records_of(sh, 0, declared(sh, 0, ((0, 2),))) == written_to(written, sh, 0)


def test_maps_no_copy_holds_are_data_lost_named_by_map_and_partition(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("both-gone").register_shuffle(2, 3)
        written = write_all(sh, 2, 90)
        assert read_all(sh) == written
        forget(fake, sh, 2, "primary")
        forget(fake, sh, 2, "replica")
        with pytest.raises(DataLostError) as info:
            records_of(sh, 2)  # the master's reply declares maps 0 and 1 for partition 2
        assert info.value.partitions == [2] and info.value.maps == [[0, 2], [1, 2]]
        assert info.value.workers == sorted(w or "" for w in pair_of(sh, 2))
        assert "(map, partition) (0, 2), (1, 2)" in info.value.message
        assert "UNKNOWN_SHUFFLE" in info.value.message


def test_a_partition_no_map_declared_is_empty_without_a_fetch(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("undeclared").register_shuffle(1, 2)
        with sh.writer(0) as w:
            w.write(0, b"only partition 0")
        assert read_all(sh) == Counter({b"only partition 0": 1})
        reader = Reader(sh, 1, _locations=declared(sh, 1, ()))
        assert list(reader) == [] and reader.stats["chunks"] == 0


def test_the_commits_lost_verdict_is_a_hint_the_proof_overrules(
    fake: FakeCluster, config: ClientConfig
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("lost-at-commit").register_shuffle(3, 2)
        written = write_all(sh, 3, 30)
        everything = read_all(sh)
        assert everything == written
        # the commit said maps 1 and 2 were gone here, but their copies are readable after all
        reply = declared(sh, 1, ((0, 3),), lost=True, lost_maps=((1, 3),))
        assert records_of(sh, 1, reply) == records_of(sh, 1)
        # once both copies really are gone, the proof names every declared map
        forget(fake, sh, 1, "primary")
        forget(fake, sh, 1, "replica")
        with pytest.raises(DataLostError) as info:
            records_of(sh, 1, declared(sh, 1, ((0, 3),), lost=True, lost_maps=((1, 3),)))
        assert info.value.partitions == [1] and info.value.maps == [[0, 1], [1, 1], [2, 1]]


def test_a_bad_batch_of_a_losing_attempt_is_ignored(fake: FakeCluster, config: ClientConfig) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        sh = client.register_app("bad-loser").register_shuffle(1, 1)
        with sh.writer(0) as w:
            w.write(0, b"kept")
        assert read_all(sh) == Counter({b"kept": 1})
        loser = make_batch(0, 0, 7, 0, b"\x01\x00\x00\x00x")
        bad = loser.encoded_header[:-1] + bytes([loser.encoded_header[-1] ^ 1]) + bytes(loser.data)
        for role, worker_id in zip(("primary", "replica"), pair_of(sh, 0), strict=True):
            worker = fake.worker(worker_id or "")
            with worker.lock:
                chunks = worker.chunks[(sh.app_id, sh.shuffle_id, 0, 0, role)]
                chunks[0] = bad + chunks[0]  # attempt 7 of map 0 did not win
        reader = sh.reader(0)
        assert list(reader) == [b"kept"] and reader.stats["switches"] == 0


def test_data_lost_error_names_the_maps_and_keeps_them_on_the_wire() -> None:
    old_style = DataLostError.of([3, 1], ["w2", "w1"], "shuffle a/0")
    assert old_style.maps == [] and old_style.details["maps"] == []
    lost = DataLostError.of([1], ["w1"], "shuffle a/0", maps=[[4, 1], [0, 1], [4, 1]])
    assert lost.maps == [[0, 1], [4, 1]]
    assert (
        lost.message
        == "shuffle a/0: data lost for partitions [1] (map, partition) (0, 1), (4, 1) on workers ['w1']"
    )
    again = error_from_wire(lost.status, lost.to_wire())
    assert isinstance(again, DataLostError) and again.maps == [[0, 1], [4, 1]] and again.partitions == [1]
