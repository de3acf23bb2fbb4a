"""``OrphanSweep``: pages of held shuffles, and dropping only what the master does not know."""

from __future__ import annotations

from croupier.core.dataplane import Reserve
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.orphans import OrphanSweep
from croupier.dataplane.reservations import Reservations
from croupier.storage.limiter import MemoryLimiter

ME = Identity("w1", "inc-1")


def reserve(r: Reservations, app: str, shuffle: int) -> None:
    r.reserve(Reserve(app, shuffle, "inc-1", 1, False, pairs=(("w1", None),)))


def test_pages_go_round_every_key_held() -> None:
    r = Reservations(ME)
    for sid in range(3):
        reserve(r, "a", sid)
    locations = Locations(MemoryLimiter(1 << 30))
    sweep = OrphanSweep(r, locations, [("b", 7), ("a", 1)], lambda a, s: None, page_size=2)
    pages = [sweep.page()[1] for _ in range(3)]
    assert pages == [(("a", 0), ("a", 1)), (("a", 2), ("b", 7)), (("a", 0), ("a", 1))]


def test_only_unknown_keys_of_the_page_not_reserved_since_are_dropped() -> None:
    r = Reservations(ME)
    reserve(r, "a", 1)
    reserve(r, "a", 2)
    dropped: list[tuple[str, int]] = []
    locations = Locations(MemoryLimiter(1 << 30))
    sweep = OrphanSweep(r, locations, [("gone", 0)], lambda a, s: dropped.append((a, s)))
    seq, page = sweep.page()
    assert page == (("a", 1), ("a", 2), ("gone", 0))
    reserve(r, "a", 2)  # placed again (same id) after the listing, before the answer
    sweep.unknown(seq, page, [("a", 1), ("a", 2), ("gone", 0), ("never-sent", 3)])
    assert dropped == [("a", 1), ("gone", 0)]
    assert r.keys() == {("a", 2)}
    assert sweep.page()[1] == (("a", 2),)
