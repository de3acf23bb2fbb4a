"""The commit coordinator's retries follow a worker that registered again on another port
(a restart mid-commit): they went to the old address until every try had timed out."""

from __future__ import annotations

import queue
import socket

from croupier.actors.commit_coordinator import CommitCoordinator, CommitPlan
from croupier.core.codec import from_json, to_json
from croupier.core.commands import Command, ReportCommit
from croupier.core.commit_verdict import Copy
from croupier.core.dataplane import CommitFiles, CommitFilesReply, LocationReport
from croupier.core.enums import CopyRole
from croupier.core.wire import MsgType
from croupier.transports.rpc import Request, Responder, RpcServer


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()  # nothing listens there: a connection is refused, a request times out
    return port


def test_retries_go_to_the_address_a_restarted_worker_registered() -> None:
    asked: queue.SimpleQueue[CommitFiles] = queue.SimpleQueue()

    def on_commit(request: Request, responder: Responder) -> None:
        asked.put(from_json(CommitFiles, request.body))
        responder.ok(to_json(CommitFilesReply("inc-2", (LocationReport(0, 0, CopyRole.PRIMARY, True),))))

    restarted = RpcServer("tcp://127.0.0.1:0", on_commit, allowed_types=[int(MsgType.COMMIT_FILES)])
    restarted.start()
    reports: queue.SimpleQueue[Command] = queue.SimpleQueue()
    coordinator = CommitCoordinator(reports.put, timeout=1.0, tries=3)
    try:
        old = f"tcp://127.0.0.1:{_closed_port()}"
        plan = CommitPlan("app-1", 0, 1, (Copy(0, 0, "w0", CopyRole.PRIMARY, "inc-1"),), workers={"w0": old})
        coordinator.commit(plan)
        coordinator.set_lost("w0", False, restarted.url)  # it registered again, on another port
        report = reports.get(timeout=30)
        assert asked.get(timeout=1) == CommitFiles("app-1", 0)  # the retry reached the new address
        assert isinstance(report, ReportCommit)
        # the copy was placed on the earlier incarnation: failed, told by the worker's reply
        assert report.failed_copies == ((0, 0, "w0"),)
    finally:
        coordinator.stop()
        restarted.stop()
