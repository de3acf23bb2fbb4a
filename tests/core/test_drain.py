"""A decommissioning worker is shown ``drained`` (STATUS rows, heartbeat replies) once no
registered shuffle holds a slot on it, and ``active`` again when it registers anew."""

from __future__ import annotations

from croupier.core import commands as c
from tests.core.test_decide import Master, worker


def shown(m: Master, wid: str) -> str:
    rows = m(c.Status())["workers"]
    return next(str(r["status"]) for r in rows if r["worker_id"] == wid)


def beat(m: Master, wid: str) -> str:
    return str(m(c.WorkerHeartbeat(wid, "inc1"))["status"])


def test_a_decommissioning_worker_drains_when_its_last_shuffle_is_unregistered() -> None:
    m = Master()
    for i in range(3):
        m(worker(i))
    m(c.RegisterApp("job", "app1"))
    m(c.RegisterApp("job", "app2"))
    m(c.RegisterShuffle("app1", 1, 3))
    m(c.RegisterShuffle("app2", 1, 3))
    assert m(c.DecommissionWorker("w0")) == {"changed": True, "status": "decommissioning"}
    assert shown(m, "w0") == beat(m, "w0") == "decommissioning"
    m(c.UnregisterShuffle("app1", 0))
    assert beat(m, "w0") == "decommissioning"  # app2's shuffle still holds slots on it
    m(c.ExpireApp("app2"))
    assert shown(m, "w0") == beat(m, "w0") == "drained"
    assert m(c.DecommissionWorker("w0")) == {"changed": False, "status": "drained"}
    assert shown(m, "w1") == "active"
    m(c.RegisterWorker("w0", "h0", 1, 2, 3, 4, 1_000_000, "inc2"))  # restarted
    assert shown(m, "w0") == "active"


def test_an_idle_worker_is_drained_at_once() -> None:
    m = Master()
    m(worker(0))
    assert m(c.DecommissionWorker("w0")) == {"changed": True, "status": "drained"}
