"""``WorkerHeartbeat.held``: the master names the shuffles it does not know (a worker's orphans)."""

from __future__ import annotations

import pytest

from croupier.core import commands as c
from croupier.core.errors import BadRequest
from tests.core.test_decide import Master, master

__all__ = ["master"]  # the fixture, shared with test_decide


def test_a_heartbeat_with_held_shuffles_gets_back_those_the_master_does_not_know(master: Master) -> None:
    sid = master(c.RegisterShuffle("app1", 1, 4))["shuffle_id"]
    master(c.RegisterApp("job2", "app2"))
    gone = master(c.RegisterShuffle("app2", 1, 4))["shuffle_id"]
    master(c.UnregisterApp("app2"))
    held = (("app1", sid), ("app1", sid + 1), ("app2", gone), ("never", 0))
    reply = master(c.WorkerHeartbeat("w0", "inc1", held=held))
    assert reply["unknown"] == [["app1", sid + 1], ["app2", gone], ["never", 0]]
    assert "unknown" not in master(c.WorkerHeartbeat("w0", "inc1"))  # no held: the reply is as before
    assert master(c.WorkerHeartbeat("w0", "inc1", held=()))["unknown"] == []


def test_held_is_bounded_and_checked() -> None:
    c.WorkerHeartbeat("w0", "inc1", held=(("a", 1),) * c.MAX_HELD).validate()
    for held in ((("a", 1),) * (c.MAX_HELD + 1), (("../a", 1),), (("a", -1),)):
        with pytest.raises(BadRequest):
            c.WorkerHeartbeat("w0", "inc1", held=held).validate()
