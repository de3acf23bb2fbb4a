"""``Reservations``: what the master placed here decides which PUSH and REPLICATE are taken."""

from __future__ import annotations

import pytest

from croupier.core.dataplane import Reserve
from croupier.core.errors import BadRequest, Congested, StaleLocation
from croupier.dataplane.identity import Identity
from croupier.dataplane.reservations import Reservations
from croupier.storage.limiter import MemoryLimiter

ME = Identity("w1", "inc-1")
# partition p at epoch 0 is on PAIRS[p % 3]: w1 is primary of 0, 3, 6, ... and replica of 2, 5, ...
PAIRS = (("w1", "w2"), ("w2", "w3"), ("w3", "w1"))


def shuffle(**changes: object) -> Reserve:
    fields: dict[str, object] = {
        "app_id": "app",
        "shuffle_id": 1,
        "incarnation": "inc-1",
        "num_partitions": 10,
        "replicate": True,
        "pairs": PAIRS,
    }
    fields.update(changes)
    return Reserve(**fields)  # type: ignore[arg-type]


def test_epoch_zero_follows_the_pairs_rule_for_each_role() -> None:
    r = Reservations(ME)
    assert r.reserve(shuffle()) == 1
    r.check_push("app", 1, ((0, 0), (3, 0), (9, 0)), "w2")
    r.check_replicate("app", 1, ((2, 0), (5, 0), (8, 0)))
    for partition in (1, 2):  # w2's, and w1 only as replica
        with pytest.raises(StaleLocation):
            r.check_push("app", 1, ((partition, 0),), "w2")
    with pytest.raises(StaleLocation):
        r.check_replicate("app", 1, ((0, 0),))
    with pytest.raises(BadRequest):
        r.check_push("app", 1, ((0, 0),), "w3")  # not the placed peer
    with pytest.raises(BadRequest):
        r.check_push("app", 1, ((0, 0),), None)  # the replica left out
    with pytest.raises(BadRequest):
        r.check_push("app", 1, ((12, 0),), "w2")  # no such partition


def test_a_revived_location_is_held_at_its_epoch_only() -> None:
    r = Reservations(ME)
    r.reserve(shuffle(pairs=(), revived=((1, 2, "w1", "w3"),)))
    r.check_push("app", 1, ((1, 2),), "w3")
    for where in ((1, 1), (1, 0), (0, 0)):  # other epochs; epoch 0 was never reserved here
        with pytest.raises(StaleLocation):
            r.check_push("app", 1, (where,), "w3")
    r.reserve(shuffle())  # the epoch-0 placement arrives later: both are held
    r.check_push("app", 1, ((1, 2),), "w3")
    r.check_push("app", 1, ((0, 0),), "w2")


def test_a_reserve_is_refused_for_another_incarnation_shape_or_past_the_cap() -> None:
    r = Reservations(ME, cap=3)
    with pytest.raises(StaleLocation):
        r.reserve(shuffle(incarnation="inc-0"))
    r.reserve(shuffle())
    with pytest.raises(BadRequest):
        r.reserve(shuffle(num_partitions=11))
    r.reserve(shuffle(pairs=(), revived=((1, 1, "w1", "w2"),)))
    r.reserve(shuffle(pairs=(), revived=((1, 1, "w1", "w2"),)))  # again: counts once
    r.reserve(shuffle(shuffle_id=2))
    with pytest.raises(Congested):
        r.reserve(shuffle(shuffle_id=3))
    r.forget("app", 1)  # frees the shuffle and its revived location
    r.reserve(shuffle(shuffle_id=3))
    assert r.keys() == {("app", 2), ("app", 3)}


def test_a_shuffle_reserved_after_a_listing_is_not_forgotten_as_an_orphan() -> None:
    r = Reservations(ME)
    r.reserve(shuffle(shuffle_id=1))
    seq = r.seq
    r.reserve(shuffle(shuffle_id=2))
    assert r.forget_unless_since(("app", 1), seq) is True
    assert r.forget_unless_since(("app", 2), seq) is False
    assert r.forget_unless_since(("app", 9), seq) is True  # held only on disk: may go
    assert r.keys() == {("app", 2)}


def test_reservations_hold_memory_until_forgotten_and_are_refused_past_the_held_share() -> None:
    limiter = MemoryLimiter(10 * 1024)  # held share: 5 KiB, five entries of 1 KiB
    r = Reservations(ME, limiter=limiter)
    r.reserve(shuffle())  # the shuffle and its two pairs naming w1
    assert limiter.held == limiter.used == 3 * 1024
    r.reserve(shuffle())  # again: nothing more
    r.reserve(shuffle(pairs=(), revived=((1, 1, "w1", "w2"),)))
    assert limiter.held == 4 * 1024
    with pytest.raises(Congested):
        r.reserve(shuffle(shuffle_id=2))  # 7 KiB
    assert r.keys() == {("app", 1)}
    r.forget_unless_since(("app", 1), r.seq)  # as the orphan sweep does
    assert limiter.held == limiter.used == 0
    r.reserve(shuffle(shuffle_id=2, pairs=(("w1", "w2"),)))
    assert limiter.held == 2 * 1024
    r.forget("app", None)
    assert limiter.held == 0
