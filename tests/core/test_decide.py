"""Unit tests of the master's decisions, one behaviour each."""

from __future__ import annotations

import random
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.codec import to_json
from croupier.core.decide import decide
from croupier.core.errors import (
    BadRequest,
    Conflict,
    NotCommitted,
    NotEnoughWorkers,
    UnknownApp,
    UnknownShuffle,
    UnknownWorker,
)
from croupier.core.events import (
    Event,
    MapperEnded,
    PartitionRevived,
    ShuffleCommitted,
    decode_event,
    encode_event,
)
from croupier.core.state import MasterState, apply


class Master:
    """decide + apply, as the master shell runs them (no log)."""

    def __init__(self) -> None:
        self.state = MasterState()
        self.rng = random.Random(7)
        self.log: list[Event] = []

    def __call__(self, cmd: c.Command, now: float = 0.0) -> dict[str, Any]:
        """The reply as the wire carries it (tests/core/test_replies.py pins the typed side)."""
        reply, events = decide(self.state, cmd, now, self.rng)
        for e in events:
            apply(self.state, e)
        self.log.extend(events)
        encoded: dict[str, Any] = to_json(reply)
        return encoded


def worker(i: int, host: str | None = None, slots: int = 1_000_000) -> c.RegisterWorker:
    return c.RegisterWorker(f"w{i}", host or f"h{i}", 1, 2, 3, 4, slots, "inc1")


@pytest.fixture
def master() -> Master:
    m = Master()
    for i in range(3):
        m(worker(i))
    m(c.RegisterApp("job", "app1"))
    return m


def bits(num_partitions: int, *partitions: int) -> str:
    """The MAPPER_END bitmap declaring ``partitions``."""
    return encode_bitmap(from_partitions(partitions, num_partitions))


def test_shuffle_placement_uses_distinct_workers_for_primary_and_replica(master: Master) -> None:
    reply = master(c.RegisterShuffle("app1", num_mappers=2, num_partitions=10))
    assert reply["shuffle_id"] == 0
    pairs = reply["pairs"]
    assert isinstance(pairs, list) and len(pairs) == 3
    for primary, replica in pairs:
        assert primary != replica and replica is not None
    info = master.state.shuffle("app1", 0)
    assert info is not None
    assert sum(w.used_slots for w in master.state.workers.values()) == 20  # 10 primaries + 10 replicas


def test_replica_prefers_another_host() -> None:
    m = Master()
    m(worker(0, "hostA"))
    m(worker(1, "hostA"))
    m(worker(2, "hostB"))
    m(c.RegisterApp("job", "app1"))
    m(c.RegisterShuffle("app1", 1, 6))
    info = m.state.shuffle("app1", 0)
    assert info is not None
    hosts = {w.worker_id: w.host for w in m.state.workers.values()}
    for primary, replica in info.pairs:
        assert (replica is not None and hosts[primary] != hosts[replica]) or hosts[primary] == "hostB"


def test_replication_needs_two_workers() -> None:
    m = Master()
    m(worker(0))
    m(c.RegisterApp("job", "app1"))
    with pytest.raises(NotEnoughWorkers):
        m(c.RegisterShuffle("app1", 1, 4))
    assert m(c.RegisterShuffle("app1", 1, 4, replicate=False))["pairs"] == [["w0", None]]


def test_slots_are_respected(master: Master) -> None:
    m = Master()
    m(worker(0, slots=3))
    m(worker(1, slots=3))
    m(c.RegisterApp("job", "app1"))
    with pytest.raises(NotEnoughWorkers):
        m(c.RegisterShuffle("app1", 1, 4))
    m(c.RegisterShuffle("app1", 1, 3))
    assert {w.used_slots for w in m.state.workers.values()} == {3}


def test_excluded_lost_and_decommissioning_workers_get_no_slots(master: Master) -> None:
    master(c.ExcludeWorker("w0"))
    master(c.LoseWorker("w1"))
    with pytest.raises(NotEnoughWorkers):
        master(c.RegisterShuffle("app1", 1, 4))
    master(c.ExcludeWorker("w0", excluded=False))
    master(c.DecommissionWorker("w2"))
    with pytest.raises(NotEnoughWorkers):
        master(c.RegisterShuffle("app1", 1, 4))
    assert master(c.RegisterShuffle("app1", 1, 4, replicate=False))["pairs"] == [["w0", None]]


def test_load_aware_placement_skips_hot_workers(master: Master) -> None:
    reply = master(c.RegisterShuffle("app1", 1, 9, loads={"w0": 0.95, "w1": 0.1, "w2": 0.2}))
    workers = {w for pair in reply["pairs"] for w in pair}
    assert "w0" not in workers
    assert reply["pairs"][0][0] == "w1"  # the coolest worker leads


def test_first_mapper_end_wins_and_repeats_are_idempotent(master: Master) -> None:
    master(c.RegisterShuffle("app1", num_mappers=2, num_partitions=4))
    first = master(c.MapperEnd("app1", 0, map_id=1, attempt_id=1, touched=3, partitions=bits(4, 0, 1, 2)))
    assert first == {"winner": 1, "won": True, "all_ended": False}
    second = master(c.MapperEnd("app1", 0, map_id=1, attempt_id=0, touched=4, partitions=bits(4, 0, 1, 2, 3)))
    assert second == {"winner": 1, "won": False, "all_ended": False}
    again = master(c.MapperEnd("app1", 0, map_id=1, attempt_id=1, touched=3, partitions=bits(4, 0, 1, 2)))
    assert again["won"] is True
    assert [e for e in master.log if isinstance(e, MapperEnded)] == [
        MapperEnded("app1", 0, 1, 1, 3, bits(4, 0, 1, 2))
    ]
    assert master(c.MapperEnd("app1", 0, 0, 0, 1, bits(4, 3)))["all_ended"] is True
    with pytest.raises(BadRequest):
        master(c.MapperEnd("app1", 0, 2, 0, 1, bits(4, 3)))


def test_revive_moves_to_a_new_epoch_once(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 4))
    loc0 = master(c.GetLocations("app1", 0, 2))["locations"]
    assert isinstance(loc0, list) and len(loc0) == 1
    failed = loc0[0]["primary"]["worker_id"]
    r1 = master(c.RevivePartition("app1", 0, 2, epoch=0, failed_workers=(failed,)))
    r2 = master(c.RevivePartition("app1", 0, 2, epoch=0, failed_workers=(failed,)))
    assert r1 == r2  # a second writer asking for the same revive gets the same answer
    revived = [e for e in master.log if isinstance(e, PartitionRevived)]
    assert len(revived) == 1 and revived[0].epoch == 1 and revived[0].primary != failed
    locs = r1["locations"]
    assert isinstance(locs, list) and [loc["epoch"] for loc in locs] == [0, 1]
    with pytest.raises(BadRequest):
        master(c.RevivePartition("app1", 0, 2, epoch=5))


def test_commit_needs_every_map_and_names_lost_partitions(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 3))
    with pytest.raises(NotCommitted):
        master(c.ReportCommit("app1", 0))
    master(c.MapperEnd("app1", 0, 0, 0, 3, bits(3, 0, 1, 2)))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    p0, r0 = info.current(0).primary, info.current(0).replica
    p1 = info.current(1).primary
    assert r0 is not None
    # as the coordinator reports it: both copies of partition 0 failed, so map 0's seal there is gone
    reply = master(
        c.ReportCommit(
            "app1",
            0,
            failed_copies=((0, 0, p0), (0, 0, r0), (1, 0, p1)),
            total_bytes=9,
            lost_maps=((0, 0, 1),),
        )
    )
    assert reply["lost_partitions"] == [0]
    committed = [e for e in master.log if isinstance(e, ShuffleCommitted)]
    assert committed[0].lost_partitions == (0,)
    loc = master(c.GetLocations("app1", 0, 0))
    assert loc["committed"] is True and loc["lost"] is True
    assert master(c.GetLocations("app1", 0, 1))["lost"] is False
    # a repeated report changes nothing
    master(c.ReportCommit("app1", 0))
    assert len([e for e in master.log if isinstance(e, ShuffleCommitted)]) == 1


def test_an_epoch_whose_copies_all_failed_is_no_loss_when_every_declared_seal_survives(
    master: Master,
) -> None:
    # verify --ha found this false DataLost: epoch 0 was placed on a worker's stale incarnation and
    # on a worker that then paused; every push went to epoch 1, whose copies hold every seal
    master(c.RegisterShuffle("app1", 1, 2))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    p0, r0 = info.current(0).primary, info.current(0).replica
    assert r0 is not None
    master(c.RevivePartition("app1", 0, 0, 0, failed_workers=(r0,)))
    master(c.MapperEnd("app1", 0, 0, 0, 2, bits(2, 0, 1)))
    reply = master(c.ReportCommit("app1", 0, failed_copies=((0, 0, p0), (0, 0, r0))))
    assert reply["lost_partitions"] == []
    loc = master(c.GetLocations("app1", 0, 0))
    assert loc["lost"] is False and sorted(w for _, w in loc["failed_copies"]) == sorted([p0, r0])


def test_empty_copies_are_logged_with_the_commit_and_checked_against_the_placement(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 2))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    p0, r0 = info.current(0).primary, info.current(0).replica
    assert r0 is not None
    master(c.RevivePartition("app1", 0, 0, 0))  # epoch 1 of partition 0: nothing pushed there
    e1 = info.current(0)
    master(c.MapperEnd("app1", 0, 0, 0, 2, bits(2, 0, 1)))
    empty = tuple(sorted([(0, 1, e1.primary), (0, 1, str(e1.replica))]))
    for bad in (((0, 2, p0),), ((0, 1, "w-none"),), ((7, 0, p0),)):  # no such epoch, copy, partition
        with pytest.raises(BadRequest):
            master(c.ReportCommit("app1", 0, empty_copies=bad))
    with pytest.raises(BadRequest, match="both empty and failed"):
        master(c.ReportCommit("app1", 0, failed_copies=empty[:1], empty_copies=empty[:1]))
    master(c.ReportCommit("app1", 0, empty_copies=empty))
    committed = next(e for e in master.log if isinstance(e, ShuffleCommitted))
    assert committed.empty_copies == empty and info.commit is not None and info.commit.empty_copies == empty


def test_a_locations_batch_is_the_per_partition_replies_with_the_shared_part_once(master: Master) -> None:
    master(c.RegisterShuffle("app1", 2, 5))
    master(c.MapperEnd("app1", 0, 0, 1, 5, bits(5, 0, 1, 2, 3, 4)))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    master(c.RevivePartition("app1", 0, 3, epoch=0, failed_workers=(str(info.current(3).primary),)))
    parts = (4, 3, 0, 3)
    for committed in (False, True):
        batch = master(c.GetLocationsBatch("app1", 0, parts))
        entries = batch.pop("partitions")
        assert isinstance(entries, list) and [e["partition"] for e in entries] == list(parts)
        for entry in entries:
            single = master(c.GetLocations("app1", 0, entry["partition"]))
            assert {**batch, **entry} == single
        runs = [[0, 1, 1], [1, 2, 0]] if committed else [[0, 1, 1]]
        assert batch["committed"] is committed and batch["winner_runs"] == runs
        if not committed:
            master(c.MapperEnd("app1", 0, 1, 0, 5, bits(5, 0, 1, 2, 3, 4)))
            p3 = info.current(3).primary
            master(c.ReportCommit("app1", 0, failed_copies=((3, 1, p3),)))
    assert master(c.GetLocationsBatch("app1", 0, (3,)))["partitions"][0]["failed_copies"] == [[1, p3]]
    for bad in ((), (5,), (-1,), tuple(range(c.MAX_PARTITIONS_PER_CALL + 1))):
        with pytest.raises(BadRequest):
            cmd = c.GetLocationsBatch("app1", 0, bad)
            cmd.validate()
            master(cmd)
    with pytest.raises(UnknownShuffle):
        master(c.GetLocationsBatch("app1", 7, (0,)))


def test_unregister_and_expiry_release_slots(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 6))
    master(c.RegisterShuffle("app1", 1, 6))
    assert sum(w.used_slots for w in master.state.workers.values()) == 24
    master(c.UnregisterShuffle("app1", 0))
    assert sum(w.used_slots for w in master.state.workers.values()) == 12
    with pytest.raises(UnknownShuffle):
        master(c.GetShuffle("app1", 0))
    master(c.ExpireApp("app1"))
    assert sum(w.used_slots for w in master.state.workers.values()) == 0
    with pytest.raises(UnknownApp):
        master(c.AppHeartbeat("app1"))
    assert master(c.UnregisterApp("app1")) == {"changed": False}


def test_register_app_generates_ids_and_is_idempotent_with_an_id(master: Master) -> None:
    a = master(c.RegisterApp("etl"))["app_id"]
    b = master(c.RegisterApp("etl"))["app_id"]
    assert isinstance(a, str) and a.startswith("etl-") and a != b
    assert master(c.RegisterApp("etl", "fixed"))["app_id"] == "fixed"
    n = len(master.log)
    master(c.RegisterApp("etl", "fixed"))
    assert len(master.log) == n
    with pytest.raises(Conflict) as info:  # issue 22 §3.6: documented, and names what is registered
        master(c.RegisterApp("other", "fixed"))
    assert info.value.details == {"app_id": "fixed", "name": "etl"}
    assert len(master.log) == n


def test_register_shuffle_with_id_is_idempotent(master: Master) -> None:
    a = master(c.RegisterShuffle("app1", 2, 4, shuffle_id=7))
    b = master(c.RegisterShuffle("app1", 2, 4, shuffle_id=7))
    assert a == b
    with pytest.raises(Conflict):
        master(c.RegisterShuffle("app1", 2, 5, shuffle_id=7))
    assert master(c.RegisterShuffle("app1", 1, 1))["shuffle_id"] == 8


def test_worker_heartbeat_asks_unknown_or_lost_workers_to_register(master: Master) -> None:
    assert master(c.WorkerHeartbeat("w0", "inc1"))["status"] == "active"
    with pytest.raises(UnknownWorker):
        master(c.WorkerHeartbeat("w0", "inc2"))
    master(c.LoseWorker("w0"))
    with pytest.raises(UnknownWorker):
        master(c.WorkerHeartbeat("w0", "inc1"))
    master(c.RegisterWorker("w0", "h0", 1, 2, 3, 4, 1000, "inc2"))
    assert master.state.workers["w0"].status == "active"


def test_a_hundred_thousand_partitions_stay_one_compact_event(master: Master) -> None:
    from croupier.core.events import encode_event

    master(c.RegisterShuffle("app1", 100, 100_000))
    assert len(encode_event(master.log[-1])) < 1000


# -- issue 12: declared partitions, the commit's verdict, idempotent registration ---------------


def test_registration_records_the_incarnation_of_every_placed_worker(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 6))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    assert info.incarnations == (("w0", "inc1"), ("w1", "inc1"), ("w2", "inc1"))
    assert info.locations(4)[0].incarnation("w1") == "inc1"  # epoch 0 too


def test_a_retried_register_shuffle_with_its_request_id_returns_the_same_shuffle(master: Master) -> None:
    first = master(c.RegisterShuffle("app1", 2, 4, request_id="req-1"))
    logged = len(master.log)
    again = master(c.RegisterShuffle("app1", 2, 4, request_id="req-1"))
    assert again == first and len(master.log) == logged
    assert master(c.RegisterShuffle("app1", 2, 4, request_id="req-2"))["shuffle_id"] == 1
    with pytest.raises(Conflict):
        master(c.RegisterShuffle("app1", 3, 4, request_id="req-1"))
    # durable: a snapshot (and so a restarted or new leader) still knows the request
    master.state = MasterState.from_snapshot(master.state.snapshot_bytes())
    assert master(c.RegisterShuffle("app1", 2, 4, request_id="req-1"))["shuffle_id"] == 0


@pytest.mark.parametrize(
    ("touched", "partitions", "match"),
    [
        (2, bits(9, 1, 8), "bytes"),
        (1, bits(4, 1, 2), "touched"),
        (1, encode_bitmap(b"\x20"), "past partition"),
    ],
)
def test_a_mapper_end_whose_bitmap_does_not_fit_the_shuffle_is_refused(
    master: Master, touched: int, partitions: str, match: str
) -> None:
    master(c.RegisterShuffle("app1", 1, 5))
    with pytest.raises(BadRequest, match=match):
        master(c.MapperEnd("app1", 0, 0, 0, touched, partitions))
    assert not [e for e in master.log if isinstance(e, MapperEnded)]


def test_locations_name_the_winning_maps_that_declared_the_partition(master: Master) -> None:
    master(c.RegisterShuffle("app1", 4, 3))
    master(c.MapperEnd("app1", 0, 0, 0, 2, bits(3, 0, 2)))
    master(c.MapperEnd("app1", 0, 1, 5, 1, bits(3, 2)))
    master(c.MapperEnd("app1", 0, 1, 6, 1, bits(3, 1)))  # a losing attempt: its bitmap is not kept
    # before every map has ended ``maps`` is absent (it would cost O(num_mappers) a reply)
    assert "maps" not in master(c.GetLocations("app1", 0, 1))
    assert "maps" not in master(c.RevivePartition("app1", 0, 0, epoch=0))
    master(c.MapperEnd("app1", 0, 3, 0, 3, bits(3, 0, 1, 2)))
    master(c.MapperEnd("app1", 0, 2, 0, 1, bits(3, 2)))
    batch = master(c.GetLocationsBatch("app1", 0, (0, 1, 2)))
    assert [e["maps"] for e in batch["partitions"]] == [[[0, 1], [3, 4]], [[3, 4]], [[0, 4]]]
    # cached once every map has ended: a snapshot's fresh state answers the same
    fresh = MasterState.from_snapshot(master.state.snapshot_bytes())
    info = fresh.shuffle("app1", 0)
    assert info is not None and info.declared_maps(2) == ((0, 4),)
    assert master.state.to_json() == fresh.to_json()


def test_version_1_mapper_ended_events_replay_and_leave_maps_unknown(master: Master) -> None:
    master(c.RegisterShuffle("app1", 2, 3))
    old = b'{"e":"MapperEnded","v":1,"app_id":"app1","shuffle_id":0,"map_id":0,"attempt_id":0,"touched":2}'
    apply(master.state, decode_event(old))
    master(c.MapperEnd("app1", 0, 1, 0, 1, bits(3, 1)))
    reply = master(c.GetLocations("app1", 0, 1))
    assert reply["winner_runs"] == [[0, 2, 0]] and "maps" not in reply
    event = next(e for e in master.log if isinstance(e, MapperEnded))
    assert encode_event(event).startswith(b'{"e":"MapperEnded","v":2,')
    assert decode_event(encode_event(event)) == event


def test_maps_lost_at_commit_make_the_partition_lost_and_are_named(master: Master) -> None:
    master(c.RegisterShuffle("app1", 3, 2))
    for m in range(3):
        master(c.MapperEnd("app1", 0, m, 0, 2, bits(2, 0, 1)))
    with pytest.raises(BadRequest):
        master(c.ReportCommit("app1", 0, lost_maps=((1, 2, 4),)))  # map 3 does not exist
    reply = master(c.ReportCommit("app1", 0, lost_maps=((1, 0, 1), (1, 2, 3))))
    assert reply["lost_partitions"] == [1]
    committed = next(e for e in master.log if isinstance(e, ShuffleCommitted))
    assert committed.lost_maps == ((1, 0, 1), (1, 2, 3))
    loc = master(c.GetLocations("app1", 0, 1))
    assert loc["lost"] is True and loc["lost_maps"] == [[0, 1], [2, 3]] and loc["maps"] == [[0, 3]]
    assert "lost_maps" not in master(c.GetLocations("app1", 0, 0))


def test_a_partition_no_winner_declared_is_not_lost_when_its_copies_fail(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 2, replicate=False))
    master(c.MapperEnd("app1", 0, 0, 0, 1, bits(2, 1)))
    info = master.state.shuffle("app1", 0)
    assert info is not None
    failed = tuple((p, 0, info.current(p).primary) for p in range(2))
    # the coordinator's verdict: map 0's seal for partition 1 survives nowhere
    report = c.ReportCommit("app1", 0, failed_copies=failed, lost_maps=((1, 0, 1),))
    assert master(report)["lost_partitions"] == [1]
    empty = master(c.GetLocations("app1", 0, 0))
    assert empty["lost"] is False and empty["maps"] == [] and empty["failed_copies"]
