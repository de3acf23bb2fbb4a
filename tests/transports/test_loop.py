"""The hand-off and loop that ``RpcServer`` and ``AsyncRpcClient`` share (``transports/_loop.py``)."""

from __future__ import annotations

import logging
import os
import select

import pytest
import zmq

from croupier.transports._loop import Mailbox, run_loop


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_burst_of_items_costs_one_wake_up_byte_and_drains_in_order() -> None:
    box: Mailbox[int] = Mailbox()
    box.open()
    try:
        assert not _readable(box.fd)
        for i in range(5):
            box.put(i)
        assert os.read(box.fd, 4096) == b"\x01"  # one byte for the burst
        box.clear(readable=False)  # the byte was read above
        assert list(box.drain()) == [0, 1, 2, 3, 4]
        assert list(box.drain()) == []
        box.put(5)  # cleared: the next item wakes the owner again
        assert _readable(box.fd)
        box.clear(readable=True)
        assert not _readable(box.fd)
        assert list(box.drain()) == [5]
    finally:
        box.close()


def test_after_close_items_still_queue_and_wake_ups_are_dropped() -> None:
    box: Mailbox[str] = Mailbox()
    box.open()
    box.close()
    box.close()  # idempotent
    assert box.fd == -1
    box.put("late")
    box.wake()
    assert list(box.drain()) == ["late"]


def test_run_loop_survives_a_bad_turn_and_stops_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    turns: list[int] = []

    def turn() -> None:
        turns.append(len(turns))
        if len(turns) == 1:
            raise RuntimeError("one bad turn")

    log = logging.getLogger("croupier.test.loop")
    with caplog.at_level(logging.ERROR, logger="croupier.test.loop"):
        assert run_loop("t", "server", lambda: len(turns) >= 3, turn, log) is True
    assert turns == [0, 1, 2]
    assert "t: unexpected error in the server loop" in caplog.text


def test_run_loop_ends_when_the_context_is_terminated(caplog: pytest.LogCaptureFixture) -> None:
    def turn() -> None:
        raise zmq.ContextTerminated()

    log = logging.getLogger("croupier.test.loop")
    with caplog.at_level(logging.ERROR, logger="croupier.test.loop"):
        assert run_loop("t", "client", lambda: False, turn, log) is False
    assert "t: context terminated under a running client" in caplog.text
