"""``Registration`` against a scripted master: it registers until accepted, heartbeats with
the sampled load, and registers again when the master no longer knows the incarnation."""

from __future__ import annotations

import logging
import queue
from typing import Any

import pytest

from croupier.core.commands import Command, RegisterWorker, WorkerHeartbeat
from croupier.core.errors import CroupierError, Unavailable, UnknownWorker
from croupier.dataplane.registration import Registration

REGISTER = RegisterWorker("worker-1", "127.0.0.1", 1, 2, 3, 4, 8, "inc-1")


class ScriptedMaster:
    """Answers each call with the next scripted outcome (an error to raise, or OK), and
    reports every command it got on ``calls``."""

    def __init__(self, *script: CroupierError | None) -> None:
        self._script = list(script)
        self.calls: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.closed = False

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        outcome = self._script.pop(0) if self._script else None
        self.calls.put(command)
        if outcome is not None:
            raise outcome
        return {}

    def close(self) -> None:
        self.closed = True


def test_it_registers_heartbeats_and_registers_again_when_forgotten() -> None:
    master = ScriptedMaster(Unavailable("no master yet"), None, None, UnknownWorker("who?"))
    registration = Registration(
        master,  # type: ignore[arg-type]
        REGISTER,
        interval=0.01,
        sample_load=lambda: (0.12345, 0.5),
        pending_flush=lambda: 3.0,
    )
    registration.start()
    try:
        kinds = [type(master.calls.get(timeout=10)) for _ in range(6)]
        assert registration.wait(10)
    finally:
        registration.stop()
    # unreachable, accepted, a beat, forgotten, registered again, beating again
    assert kinds == [
        RegisterWorker,
        RegisterWorker,
        WorkerHeartbeat,
        WorkerHeartbeat,
        RegisterWorker,
        WorkerHeartbeat,
    ]
    assert registration.load == {"disk_util": 0.123, "io_wait": 0.5}
    assert master.closed


def test_a_heartbeat_carries_the_incarnation_and_the_capped_pending_flush() -> None:
    master = ScriptedMaster()
    registration = Registration(
        master,  # type: ignore[arg-type]
        REGISTER,
        interval=0.01,
        sample_load=lambda: (0.2, 0.1),
        pending_flush=lambda: 3.0,
    )
    registration.start()
    try:
        assert master.calls.get(timeout=10) == REGISTER
        beat = master.calls.get(timeout=10)
    finally:
        registration.stop()
    assert beat == WorkerHeartbeat("worker-1", "inc-1", disk_util=0.2, io_wait=0.1, pending_flush=1.0)


class StatusMaster(ScriptedMaster):
    """Answers every heartbeat with ``status``."""

    def __init__(self, status: str) -> None:
        super().__init__()
        self.status = status

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        super().call(command, timeout=timeout)
        return {"status": self.status, "excluded": False} if isinstance(command, WorkerHeartbeat) else {}


def test_every_heartbeat_reply_status_goes_to_on_status() -> None:
    seen: queue.SimpleQueue[str] = queue.SimpleQueue()
    registration = Registration(
        StatusMaster("decommissioning"),  # type: ignore[arg-type]
        REGISTER,
        interval=0.01,
        sample_load=lambda: (0.0, 0.0),
        pending_flush=lambda: 0.0,
        on_status=seen.put,
    )
    registration.start()
    try:
        assert [seen.get(timeout=10) for _ in range(2)] == ["decommissioning"] * 2
    finally:
        registration.stop()


class TellingMaster(ScriptedMaster):
    """Answers with ``worker_timeout``: the first ``told`` to the registration, then ``later``."""

    def __init__(self, told: float, later: float) -> None:
        super().__init__()
        self.replies = [{"worker_id": "worker-1", "incarnation": "inc-1", "worker_timeout": told}]
        self.later = later

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        super().call(command)
        return (
            self.replies.pop(0)
            if self.replies
            else {"status": "active", "excluded": False, "worker_timeout": self.later}
        )


def _interval_after_beats(master: TellingMaster, configured: float | None) -> float:
    registration = Registration(
        master,  # type: ignore[arg-type]
        REGISTER,
        interval=configured,
        sample_load=lambda: (0.0, 0.0),
        pending_flush=lambda: 0.0,
    )
    if configured is None:
        assert registration.interval == 10.0  # until the master says otherwise
    registration.start()
    try:
        for _ in range(3):
            master.calls.get(timeout=10)
    finally:
        registration.stop()
    return registration.interval


def test_by_default_it_beats_at_a_third_of_the_timeout_it_is_told_and_follows_a_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 22 §1: a master with a short ``--worker-timeout`` no longer loses default workers."""
    with caplog.at_level(logging.INFO, "croupier.dataplane.registration"):
        assert _interval_after_beats(TellingMaster(0.09, 0.06), None) == pytest.approx(0.02)
    assert "worker timeout is 0.09s: heartbeats every 0.03s" in caplog.text
    assert "worker timeout is 0.06s: heartbeats every 0.02s" in caplog.text  # a new leader's


def test_an_explicit_interval_is_kept_and_warned_about_when_too_slow(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, "croupier.dataplane.registration"):
        assert _interval_after_beats(TellingMaster(0.09, 0.09), 0.04) == 0.04
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("0.04s" in w and "timeout 0.09s" in w for w in warnings), warnings
