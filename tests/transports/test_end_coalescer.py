"""``EndCoalescer``: concurrent MAPPER_ENDs of one process go out together, each caller gets its own."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.errors import BadRequest, Unavailable
from croupier.core.replies import MapperEndReply
from croupier.transports.end_coalescer import EndCoalescer


class FakeMaster:
    """Answers MapperEnd and MapperEndBatch as the master would (first attempt wins); the
    first call waits for ``release`` so that the others queue behind it."""

    def __init__(self) -> None:
        self.sent: list[c.Command] = []
        self.release = threading.Event()
        self.fail_whole: Exception | None = None
        self.winners: dict[tuple[int, int], int] = {}

    def _one(self, cmd: c.MapperEnd) -> dict[str, Any]:
        if cmd.map_id >= 100:
            return {
                "error": {"status": 1, "code": "BAD_REQUEST", "message": "map_id out of range", "details": {}}
            }
        winner = self.winners.setdefault((cmd.shuffle_id, cmd.map_id), cmd.attempt_id)
        return {"winner": winner, "won": winner == cmd.attempt_id, "all_ended": False}

    def __call__(self, cmd: c.Command) -> dict[str, Any]:
        first = not self.sent
        self.sent.append(cmd)
        if first:
            assert self.release.wait(10)
        if self.fail_whole is not None:
            raise self.fail_whole
        if isinstance(cmd, c.MapperEndBatch):
            return {"results": [self._one(e) for e in cmd.commands()]}
        assert isinstance(cmd, c.MapperEnd)
        body = self._one(cmd)
        if "error" in body:
            raise BadRequest(body["error"]["message"])
        return body


def _end(shuffle: int, map_id: int, attempt: int = 0) -> c.MapperEnd:
    return c.MapperEnd("app-1", shuffle, map_id, attempt, 1, "AQ==")


def _run(ends: EndCoalescer, master: FakeMaster, commands: list[c.MapperEnd]) -> dict[int, Any]:
    """Send the first command, queue the others behind it, then let the first return."""
    out: dict[int, Any] = {}

    def call(i: int, cmd: c.MapperEnd) -> None:
        try:
            out[i] = ends.end(cmd)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=call, args=(0, commands[0]))]
    threads[0].start()
    while not master.sent:
        time.sleep(0.001)
    for i, cmd in enumerate(commands[1:], 1):
        threads.append(threading.Thread(target=call, args=(i, cmd)))
        threads[-1].start()
    while len(ends._pending) < len(commands) - 1:  # every other caller is queued
        time.sleep(0.001)
    master.release.set()
    for t in threads:
        t.join(10)
    return out


def test_one_caller_sends_a_plain_mapper_end() -> None:
    master = FakeMaster()
    master.release.set()
    ends = EndCoalescer(master)
    assert ends.end(_end(0, 1)) == MapperEndReply(0, True, False)
    assert [type(cmd) for cmd in master.sent] == [c.MapperEnd]


def test_callers_queued_behind_one_in_flight_go_as_one_batch_per_shuffle_each_with_its_reply() -> None:
    master = FakeMaster()
    ends = EndCoalescer(master)
    commands = [_end(0, 0), _end(0, 1), _end(1, 1), _end(0, 2), _end(0, 1, attempt=1), _end(0, 150)]
    out = _run(ends, master, commands)
    assert [type(cmd).__name__ for cmd in master.sent] == ["MapperEnd", "MapperEndBatch", "MapperEnd"]
    batch = master.sent[1]
    assert isinstance(batch, c.MapperEndBatch)
    assert [e[0] for e in batch.ends] == [1, 2, 1, 150]  # shuffle 0's, in order; shuffle 1's next
    assert out[0] == out[1] == out[2] == out[3] == MapperEndReply(0, True, False)
    assert out[4] == MapperEndReply(0, False, False)  # the second attempt of map 1 lost
    assert isinstance(out[5], BadRequest) and "out of range" in out[5].message  # only its own caller
    assert ends.requests == 3 and not ends._pending and not ends._busy


def test_a_failed_call_reaches_every_caller_in_it_and_the_next_one_still_goes() -> None:
    master = FakeMaster()
    master.fail_whole = Unavailable("no leader in time")
    ends = EndCoalescer(master)
    out = _run(ends, master, [_end(0, 0), _end(0, 1), _end(0, 2)])
    assert all(isinstance(v, Unavailable) for v in out.values())
    master.fail_whole = None
    assert ends.end(_end(0, 3)).won  # the coalescer is free again


def test_the_caps_split_a_queue() -> None:
    master = FakeMaster()
    ends = EndCoalescer(master, max_ends=2)
    out = _run(ends, master, [_end(0, m) for m in range(6)])
    sizes = [len(cmd.ends) if isinstance(cmd, c.MapperEndBatch) else 1 for cmd in master.sent]
    assert sizes == [1, 2, 2, 1] and all(v.won for v in out.values())


@pytest.mark.parametrize("bitmap_chars", [100, 300_000])
def test_a_batch_s_body_stays_below_its_byte_cap(bitmap_chars: int) -> None:
    master = FakeMaster()
    ends = EndCoalescer(master, max_bytes=1000)
    big = "A" * bitmap_chars
    commands = [c.MapperEnd("app-1", 0, m, 0, 1, big) for m in range(5)]
    _run(ends, master, commands)
    for cmd in master.sent:
        if isinstance(cmd, c.MapperEndBatch):
            assert sum(len(e[3]) for e in cmd.ends) <= 1000
    assert sum(len(cmd.ends) if isinstance(cmd, c.MapperEndBatch) else 1 for cmd in master.sent) == 5


def test_a_batch_refused_whole_goes_again_one_end_at_a_time() -> None:
    """A master that predates MAPPER_END_BATCH refuses it; each end then goes alone."""

    class OldMaster(FakeMaster):
        def __call__(self, cmd: c.Command) -> dict[str, Any]:
            if isinstance(cmd, c.MapperEndBatch):
                self.sent.append(cmd)
                raise BadRequest("master does not serve msg_type 43")
            return super().__call__(cmd)

    master = OldMaster()
    ends = EndCoalescer(master)
    out = _run(ends, master, [_end(0, 0), _end(0, 1), _end(0, 150)])
    assert [type(cmd).__name__ for cmd in master.sent] == [
        "MapperEnd",
        "MapperEndBatch",
        "MapperEnd",
        "MapperEnd",
    ]
    assert out[1].won and isinstance(out[2], BadRequest)
