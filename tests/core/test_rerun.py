"""Reruns in the master's core: GET_LOST_MAPS, RERUN_MAPS, the MapsRerun event, replay."""

from __future__ import annotations

from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.errors import Conflict
from croupier.core.events import MapsRerun, PartitionRevived, decode_event, encode_event
from croupier.core.state import MasterState, apply
from tests.core.test_decide import Master, bits, worker


@pytest.fixture
def master() -> Master:
    m = Master()
    for i in range(4):
        m(worker(i))
    m(c.RegisterApp("job", "app1"))
    return m


def committed(master: Master, lost_maps: tuple[tuple[int, int, int], ...] = ()) -> list[list[Any]]:
    """A 3-map, 4-partition shuffle: map m declares partitions {m, 3}; committed. Returns pairs."""
    pairs: list[list[Any]] = master(c.RegisterShuffle("app1", num_mappers=3, num_partitions=4))["pairs"]
    for m in range(3):
        master(c.MapperEnd("app1", 0, m, 0, 2, bits(4, m, 3)))
    master(c.ReportCommit("app1", 0, lost_maps=lost_maps))
    return pairs


def holders(master: Master, partition: int) -> set[str]:
    info = master.state.shuffle("app1", 0)
    assert info is not None
    loc = info.current(partition)
    return {w for w in (loc.primary, loc.replica) if w is not None}


def test_nothing_is_lost_after_a_clean_commit_and_a_rerun_of_intact_maps_is_refused(master: Master) -> None:
    committed(master)
    lost = master(c.GetLostMaps("app1", 0))
    assert lost["lost"] == [] and lost["suspect"] == [] and lost["committed"] is True
    with pytest.raises(Conflict) as info:
        master(c.RerunMaps("app1", 0, (1,)))
    assert info.value.details["maps"] == [1] and "not lost" in info.value.message


def test_maps_lost_at_commit_are_named_and_can_be_rerun(master: Master) -> None:
    committed(master, lost_maps=((1, 1, 2),))
    assert master(c.GetLostMaps("app1", 0))["lost"] == [[1, 1, 2]]
    reply = master(c.RerunMaps("app1", 0, (1,)))
    assert reply["maps"] == [[1, 2]] and reply["started"] is True
    assert sorted(p for p, _ in reply["epochs"]) == [1, 3]  # map 1 declared partitions 1 and 3
    info = master.state.shuffle("app1", 0)
    assert info is not None and info.commit is None and 1 not in info.winners
    assert info.current(1).epoch == 1 and info.current(3).epoch == 1 and info.current(0).epoch == 0


def test_both_copies_of_a_partition_on_lost_workers_lose_the_maps_that_declared_it(master: Master) -> None:
    committed(master)
    for w in holders(master, 2):
        master(c.LoseWorker(w))
    lost = master(c.GetLostMaps("app1", 0))["lost"]
    assert [2, 2, 3] in lost  # map 2 declared partition 2
    assert not any(p == 2 and lo <= 0 < hi for p, lo, hi in lost)  # maps 0 and 1 did not


def test_a_rerun_refuses_the_lost_attempt_then_recommits_with_the_new_one(master: Master) -> None:
    committed(master, lost_maps=((0, 0, 1),))
    master(c.RerunMaps("app1", 0, (0,)))
    assert master(c.RerunMaps("app1", 0, (0,)))["started"] is False  # a repeat logs nothing
    with pytest.raises(Conflict):
        master(c.MapperEnd("app1", 0, 0, 0, 2, bits(4, 0, 3)))  # the lost attempt
    master(c.RevivePartition("app1", 0, 0, 1))  # a fault during the rerun revives as in any write
    info = master.state.shuffle("app1", 0)
    assert info is not None and info.current(0).epoch == 2
    ended = master(c.MapperEnd("app1", 0, 0, 7, 2, bits(4, 0, 3)))
    assert ended["won"] is True and ended["all_ended"] is True
    master(c.ReportCommit("app1", 0))
    info = master.state.shuffle("app1", 0)
    assert info is not None and info.commit is not None and info.winners[0][0] == 7
    view = master(c.GetLostMaps("app1", 0))
    assert view["lost"] == [] and view["rerun"] == [[0, 1]] and view["rerunning"] == []


def test_a_rerun_before_the_commit_is_refused(master: Master) -> None:
    master(c.RegisterShuffle("app1", num_mappers=2, num_partitions=2))
    with pytest.raises(Conflict):
        master(c.RerunMaps("app1", 0, (0,)))


def test_a_rerun_places_new_epochs_on_live_workers_only(master: Master) -> None:
    committed(master)
    dead = holders(master, 2)
    for w in dead:
        master(c.LoseWorker(w))
    reply = master(c.RerunMaps("app1", 0, (2,)))
    for p, _ in reply["epochs"]:
        assert not holders(master, p) & dead


def test_snapshot_plus_tail_equals_replay_across_a_rerun(master: Master) -> None:
    committed(master, lost_maps=((1, 1, 2),))
    snapshot = master.state.copy()
    cut = len(master.log)
    master(c.RerunMaps("app1", 0, (1,)))
    master(c.MapperEnd("app1", 0, 1, 9, 2, bits(4, 1, 3)))
    master(c.ReportCommit("app1", 0))
    kinds = [type(e) for e in master.log[cut:]]
    assert kinds[0] is MapsRerun and PartitionRevived in kinds
    replayed = MasterState()
    for e in master.log:
        apply(replayed, decode_event(encode_event(e)))
    tail = MasterState.from_snapshot(snapshot.snapshot_bytes())
    for e in master.log[cut:]:
        apply(tail, decode_event(encode_event(e)))
    assert replayed.to_json() == master.state.to_json() == tail.to_json()
    mid = MasterState()
    for e in master.log[: cut + 1]:
        apply(mid, e)
    assert MasterState.from_snapshot(mid.snapshot_bytes()).to_json() == mid.to_json()


def test_copies_on_workers_restarted_since_the_commit_are_suspect_and_may_be_rerun(master: Master) -> None:
    committed(master)
    for w in holders(master, 2):
        master(c.RegisterWorker(w, f"h{w[1:]}", 1, 2, 3, 4, 1_000_000, "inc2"), now=1.0)  # a restart
    view = master(c.GetLostMaps("app1", 0))
    assert view["lost"] == [] and [2, 2, 3] in view["suspect"]
    assert master(c.RerunMaps("app1", 0, (2,)))["started"] is True


def test_a_rerun_remembers_which_locations_were_committed_before_it(master: Master) -> None:
    committed(master, lost_maps=((1, 1, 2),))
    info = master.state.shuffle("app1", 0)
    assert info is not None and not info.was_committed(1, 0)  # no rerun yet: judged as always
    master(c.RerunMaps("app1", 0, (1,)))
    assert info.was_committed(1, 0) and info.was_committed(0, 0)
    assert not info.was_committed(1, 1)  # the rerun's new epoch: judged by its workers' memory


def test_data_lost_names_the_pairs_and_map_ids_and_they_survive_the_wire() -> None:
    from croupier.core.errors import DataLostError, error_from_wire

    lost = DataLostError.of([5, 1], ["w1"], "shuffle a/0", maps=[[4, 1], [0, 5], [4, 5]])
    back = error_from_wire(lost.status, lost.to_wire())
    assert isinstance(back, DataLostError)
    assert back.pairs == [(0, 5), (4, 1), (4, 5)] and back.map_ids == [0, 4]
    assert DataLostError("old server").pairs == [] and DataLostError("old server").map_ids == []
