"""The master actor's commit plan and the coordinator's report: a worker restarted before the
commit has its epoch-0 copies failed, and declared seals that no copy holds are reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pykka
import pytest

from croupier.actors.commit_coordinator import CommitCoordinator, CommitPlan
from croupier.actors.master_actor import MasterActor, Submit
from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.config import MasterConfig
from croupier.core.dataplane import CommitFilesReply, LocationReport
from croupier.core.enums import CopyRole
from croupier.ha.eventlog import MemoryEventLog


class RecordingCoordinator:
    """Keeps the plans the actor hands over; sends nothing."""

    def __init__(self) -> None:
        self.plans: list[CommitPlan] = []

    def commit(self, plan: CommitPlan) -> None:
        self.plans.append(plan)

    def set_lost(self, worker: str, lost: bool, url: str | None = None) -> None:
        pass

    def destroy(self, app_id: str, shuffle_id: int | None, workers: dict[str, str]) -> None:
        pass

    def apps_loaded(self, apps: object) -> None:
        pass

    def app_registered(self, app_id: str) -> None:
        pass

    def tick(self, now: float) -> None:
        pass


Recorded = tuple["pykka.ActorRef[MasterActor]", RecordingCoordinator]


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    coordinator = RecordingCoordinator()
    ref = MasterActor.start(
        MemoryEventLog(),
        MasterConfig(sweep_interval=0, takeover_grace=0),
        lambda: 1000.0,
        coordinator=cast(CommitCoordinator, coordinator),
    )
    try:
        yield ref, coordinator
    finally:
        ref.stop()


def run(ref: pykka.ActorRef[MasterActor], cmd: c.Command) -> None:
    ref.ask(Submit(cmd, None))  # returns once decided and folded: a commit plan is made by then


def test_a_worker_restarted_before_the_commit_loses_its_epoch_0_copies(recorded: Recorded) -> None:
    actor, coordinator = recorded
    for i in range(3):
        run(actor, c.RegisterWorker(f"w{i}", "h", 1, 2, 3, 4, 100, "inc1"))
    run(actor, c.RegisterApp("job", "app1"))
    run(actor, c.RegisterShuffle("app1", 2, 3))
    run(actor, c.MapperEnd("app1", 0, 0, 0, 3, encode_bitmap(from_partitions([0, 1, 2], 3))))
    run(actor, c.RegisterWorker("w0", "h", 1, 2, 3, 4, 100, "inc2"))  # w0 restarted
    run(actor, c.MapperEnd("app1", 0, 1, 0, 1, encode_bitmap(from_partitions([2], 3))))
    (plan,) = coordinator.plans
    assert plan.num_partitions == 3 and plan.winners[1] == (0, 1, b"\x04")
    assert {copy.incarnation for copy in plan.copies} == {"inc1"}  # as placed, epoch 0 included
    on_w0 = {(copy.partition, copy.epoch, "w0") for copy in plan.copies if copy.worker == "w0"}
    assert on_w0

    def reply(worker: str) -> CommitFilesReply:
        mine = [copy for copy in plan.copies if copy.worker == worker]
        seals = {0: ((0, 0, 1),), 1: ((0, 0, 1),), 2: ((0, 0, 1), (1, 0, 1))}
        return CommitFilesReply(
            "inc2" if worker == "w0" else "inc1",
            tuple(LocationReport(cp.partition, 0, cp.role, True, seals=seals[cp.partition]) for cp in mine),
        )

    report = CommitCoordinator._report(plan, {w: reply(w) for w in ("w0", "w1", "w2")})
    assert set(report.failed_copies) == on_w0 and report.lost_maps == ()
    # had the replicas missed map 1's seal too, the commit would name it
    no_seal = {
        w: CommitFilesReply(r.incarnation, tuple(loc for loc in r.locations if loc.role == CopyRole.PRIMARY))
        for w, r in {w: reply(w) for w in ("w0", "w1", "w2")}.items()
    }
    report = CommitCoordinator._report(plan, no_seal)
    # where w0 was the primary, no copy is left: every declared map of those partitions is named
    gone = {cp.partition for cp in plan.copies if cp.worker == "w0" and cp.role == CopyRole.PRIMARY}
    assert {p for p, _, _ in report.lost_maps} == gone


def test_a_worker_declared_lost_is_a_suspect_of_the_commit_plan_not_left_out(recorded: Recorded) -> None:
    actor, coordinator = recorded
    for i in range(3):
        run(actor, c.RegisterWorker(f"w{i}", "h", 10 + i, 2, 3, 4, 100, "inc1"))
    run(actor, c.RegisterApp("job", "app1"))
    run(actor, c.RegisterShuffle("app1", 1, 3))
    run(actor, c.LoseWorker("w1", "no heartbeat"))  # silent past the timeout: maybe only slow
    run(actor, c.MapperEnd("app1", 0, 0, 0, 3, encode_bitmap(from_partitions([0, 1, 2], 3))))
    (plan,) = coordinator.plans
    assert "w1" not in plan.workers and plan.suspects == {"w1": "tcp://h:11"}
