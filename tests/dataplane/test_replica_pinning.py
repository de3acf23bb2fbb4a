"""A worker forwards a PUSH only to where the master placed its replica (RESERVE's ``peers``)."""

from __future__ import annotations

import random

import pytest

from croupier.actors.reservations import shuffle_reserves
from croupier.core import commands as c
from croupier.core.dataplane import Reserve
from croupier.core.decide import decide
from croupier.core.errors import BadRequest, Unavailable
from croupier.core.state import MasterState, apply
from croupier.dataplane.identity import Identity
from croupier.dataplane.reservations import Reservations

PAIRS = (("w1", "w2"), ("w2", "w1"))


def test_a_push_naming_another_url_for_the_replica_is_refused_as_a_failed_replica() -> None:
    r = Reservations(Identity("w1", "inc-1"))
    r.reserve(Reserve("app", 1, "inc-1", 4, True, PAIRS, peers=(("w2", "tcp://10.0.0.2:7002"),)))
    r.check_push("app", 1, ((0, 0),), "w2", "tcp://10.0.0.2:7002")
    with pytest.raises(Unavailable) as info:
        r.check_push("app", 1, ((0, 0),), "w2", "tcp://attacker:9999")
    assert info.value.details == {"failed_worker": "w2"}


def test_peers_are_checked_on_the_wire() -> None:
    with pytest.raises(BadRequest):
        Reserve("app", 1, "inc-1", 4, True, PAIRS, peers=(("w2", "http://x"),)).validate()


def test_the_master_sends_each_primary_its_replicas_registered_addresses() -> None:
    state = MasterState()
    rng = random.Random(1)
    commands: list[c.Command] = [
        c.RegisterWorker("w1", "10.0.0.1", 1, 2, 7001, 4, 100, "i1"),
        c.RegisterWorker("w2", "10.0.0.2", 1, 2, 7002, 4, 100, "i2"),
        c.RegisterApp("job", "app"),
        c.RegisterShuffle("app", 1, 4, True, 0),
    ]
    for command in commands:
        _, events = decide(state, command, 0.0, rng)
        for event in events:
            state = apply(state, event)
    sends = {wid: reserve for wid, _, reserve in shuffle_reserves(state, "app", 0)}
    assert sends["w1"].peers == (("w2", "tcp://10.0.0.2:7002"),)
    assert sends["w2"].peers == (("w1", "tcp://10.0.0.1:7001"),)
