"""Issue 15: free space is a placement input. A worker whose heartbeat reports no healthy
directory with free space at or above its reserve gets no slots (new shuffles, revives)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core import commands as c
from croupier.core.errors import BadRequest, NotEnoughWorkers
from croupier.core.events import PartitionRevived
from tests.core.test_decide import Master, worker

GIB = 1024**3


@pytest.fixture
def master() -> Master:
    m = Master()
    for i in range(3):
        m(worker(i))
    m(c.RegisterApp("job", "app1"))
    return m


def test_usable_needs_a_healthy_dir_at_or_above_its_reserve() -> None:
    assert c.usable(None)
    assert c.usable((("/a", 5 * GIB, 50 * GIB, 5 * GIB, True),))
    assert not c.usable((("/a", 4 * GIB, 50 * GIB, 5 * GIB, True), ("/b", 9 * GIB, 50 * GIB, 5 * GIB, False)))
    assert not c.usable(())


def test_a_full_worker_gets_no_slots(master: Master) -> None:
    reply = master(c.RegisterShuffle("app1", 1, 12, full=("w1",)))
    assert all("w1" not in pair for pair in reply["pairs"])
    assert master.state.workers["w1"].used_slots == 0


def test_a_revive_avoids_full_workers(master: Master) -> None:
    master(c.RegisterShuffle("app1", 1, 3, replicate=False))
    loc = master(c.GetLocations("app1", 0, 0))["locations"][0]["primary"]["worker_id"]
    others = sorted({"w0", "w1", "w2"} - {loc})
    master(c.RevivePartition("app1", 0, 0, 0, failed_workers=(loc,), full=(others[0],)))
    revived = [e for e in master.log if isinstance(e, PartitionRevived)]
    assert revived[0].primary == others[1]


def test_no_usable_worker_refuses_the_shuffle(master: Master) -> None:
    with pytest.raises(NotEnoughWorkers):
        master(c.RegisterShuffle("app1", 1, 4, full=("w0", "w1")))


def test_heartbeat_dirs_are_checked() -> None:
    c.WorkerHeartbeat("w0", "inc1", dirs=(("/a", 1, 2, 0, True),)).validate()
    with pytest.raises(BadRequest):
        c.WorkerHeartbeat("w0", "inc1", dirs=(("/a", -1, 2, 0, True),)).validate()
    with pytest.raises(BadRequest):
        c.WorkerHeartbeat("w0", "inc1", dirs=tuple(("/a", 1, 2, 0, True) for _ in range(257))).validate()


_dir = st.tuples(
    st.just("/d"),
    st.integers(0, 10 * GIB),
    st.just(10 * GIB),
    st.integers(0, 10 * GIB),
    st.booleans(),
)


@given(
    st.dictionaries(st.sampled_from([f"w{i}" for i in range(6)]), st.lists(_dir, max_size=3).map(tuple)),
    st.sets(st.sampled_from([f"w{i}" for i in range(6)])),
)
def test_full_workers_are_those_without_room_that_do_not_overflow(
    dirs: dict[str, tuple[c.DirReport, ...]], overflows: set[str]
) -> None:
    """Issue 26: a worker whose full disks overflow to an object store is never full; any other
    is full exactly when its last report has no usable directory; the list is sorted."""
    full = c.full_workers(dirs, overflows)
    assert list(full) == sorted(full)
    assert set(full) == {w for w, d in dirs.items() if not c.usable(d)} - overflows
    assert not set(full) & overflows
    assert c.full_workers(dirs, set(dirs)) == ()
