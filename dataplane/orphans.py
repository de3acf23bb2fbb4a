"""``OrphanSweep``: find the shuffles this worker holds that the master no longer knows.

A worker that was down (or cut off) when the master sent a DESTROY keeps the shuffle's
files forever unless it asks. So with every heartbeat it sends a page of the (app,
shuffle) keys it holds (reserved, live, or committed on disk when it started) and the
master answers which of them it does not know: no such app, or no such shuffle. Those
are dropped as a DESTROY would drop them. Pages go round the keys, ``page_size`` at a
time, so a heartbeat stays small however much is held.

The master places a shuffle (and logs it) before it sends the ``RESERVE``, so a key it
calls unknown was not placed when it answered. A shuffle placed again under the same id
after that (a client may choose the id) gets a new ``RESERVE``: a key reserved after the
page was taken is kept.

State (the heartbeat thread only): the keys found on disk at start and not dropped since,
and the page cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from croupier.dataplane.locations import Locations
from croupier.dataplane.reservations import Reservations, ShuffleKey

__all__ = ["PAGE_SIZE", "OrphanSweep"]

PAGE_SIZE = 256  # keys per heartbeat; the master refuses more than MAX_HELD (core/commands.py)


class OrphanSweep:
    """Parameters:
    reservations: the locations placed here.
    locations: the live locations.
    on_disk: the (app, shuffle) of the committed files found at start.
    drop: destroys one shuffle here (``ControlHandler.drop_orphan``).
    page_size: keys sent per heartbeat.
    """

    def __init__(
        self,
        reservations: Reservations,
        locations: Locations,
        on_disk: Iterable[ShuffleKey],
        drop: Callable[[str, int], None],
        *,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self._reservations = reservations
        self._locations = locations
        self._on_disk = set(on_disk)
        self._drop = drop
        self._page_size = page_size
        self._cursor: ShuffleKey | None = None

    def page(self) -> tuple[int, tuple[ShuffleKey, ...]]:
        """The next keys to ask about, and the reservation sequence number before they were listed."""
        seq = self._reservations.seq  # first: a RESERVE taken while listing counts as newer
        held = self._reservations.keys() | self._locations.shuffles() | self._on_disk
        after = sorted(k for k in held if self._cursor is None or k > self._cursor)
        chosen = after[: self._page_size]
        self._cursor = chosen[-1] if len(after) > self._page_size else None
        return seq, tuple(chosen)

    def unknown(self, seq: int, sent: Iterable[ShuffleKey], unknown: Iterable[ShuffleKey]) -> None:
        """Drop the shuffles of the page ``sent`` that the master called ``unknown``, unless
        reserved again after ``seq``."""
        asked = set(sent)
        for app_id, shuffle_id in [k for k in unknown if k in asked]:
            if self._reservations.forget_unless_since((app_id, shuffle_id), seq):
                self._on_disk.discard((app_id, shuffle_id))
                self._drop(app_id, shuffle_id)
