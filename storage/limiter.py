"""``MemoryLimiter``: a worker's memory budget (DESIGN §7.4), for buffered push data and for
the state each location and reservation keeps.

Two kinds of bytes share one count, ``used``:

- **Buffered data** is counted from the moment a push is accepted until its flush to
  disk completes. Above the *push* watermark (0.85 of the cap) pushes are answered
  ``CONGESTED``; above the *replicate* watermark (0.95) replication is too. Once paused,
  the worker resumes below 0.7, so it does not flap at the edge. The client backs off
  and resends the same batches: a worker never runs out of memory because clients push
  too fast.
- **Held** bytes are the long-lived state of what a worker keeps per location
  (``LOCATION_BYTES``), per seal it keeps (``SEAL_BYTES``) and per reservation
  (``RESERVATION_BYTES``), from the moment it exists until it is destroyed. A push
  that creates a location, or a ``RESERVE``, may bring held bytes to ``held_share``
  (0.5) of the cap; a push to live locations only (their data and seals: what a writer
  needs to finish) to ``HELD_MAX_SHARE`` (0.6). Past that the message is ``CONGESTED``,
  instead of the worker growing; unlike data, even on an empty worker, so no input takes
  held state past its share. Both shares stay under the resume mark, so flushes can
  always bring a paused worker back below it: held state alone never pauses the data of
  live locations.

The constants are the worker's RSS per item, measured with ``python -m
croupier.tools.location_rss`` and with a committed and read copy of each location
(BENCHMARKS.md, issue 13), rounded up.
"""

from __future__ import annotations

import threading

__all__ = [
    "HELD_MAX_SHARE",
    "HELD_SHARE",
    "LOCATION_BYTES",
    "RESERVATION_BYTES",
    "SEAL_BYTES",
    "MemoryLimiter",
]

# RSS a location costs from its first push to its destroy (key, actor entry, index, buffer
# views, its open or committed file): 1.5 KiB with a seal, 2.8 KiB with a flushed file,
# 3.0-3.9 KiB committed and read
LOCATION_BYTES = 4096
# each distinct seal a location keeps: 106 B in its index builder, 185 B at the commit's peak
SEAL_BYTES = 256
# a shuffle's reservation, each revived location's, and each pair naming this worker
RESERVATION_BYTES = 1024
HELD_SHARE = 0.5  # of the cap, for new locations and reservations; below the resume mark (0.7)
HELD_MAX_SHARE = 0.6  # of the cap, for the seals of live locations


class MemoryLimiter:
    """Thread-safe counter with hysteresis.

    Parameters:
        cap: bytes the worker may hold in buffered data and held state.
        pause_push, pause_replicate, resume: fractions of ``cap``.
        held_share: the fraction of ``cap`` that held state may take with a new location.
    """

    def __init__(
        self,
        cap: int,
        *,
        pause_push: float = 0.85,
        pause_replicate: float = 0.95,
        resume: float = 0.7,
        held_share: float = HELD_SHARE,
    ) -> None:
        self.cap = cap
        self._pause_push = int(cap * pause_push)
        self._pause_replicate = int(cap * pause_replicate)
        self._resume = int(cap * resume)
        self._held_cap = int(cap * held_share)
        self._held_max = max(self._held_cap, int(cap * HELD_MAX_SHARE))
        self._used = 0
        self._held = 0
        self._peak = 0
        self._push_paused = False
        self._replicate_paused = False
        self._lock = threading.Lock()
        self.congested = 0

    @property
    def used(self) -> int:
        """Bytes counted now: buffered data and held state."""
        return self._used

    @property
    def held(self) -> int:
        """Bytes of held state (locations, seals, reservations) counted now."""
        return self._held

    @property
    def held_cap(self) -> int:
        """The most held state may take with a new location or reservation."""
        return self._held_cap

    @property
    def peak(self) -> int:
        return self._peak

    def try_acquire(self, nbytes: int, *, replicate: bool = False, held: int = 0, grow: bool = False) -> bool:
        """Take ``nbytes`` of buffered data and ``held`` bytes of held state, or nothing:
        refused when the held state would pass its share (``held_share`` when the message
        creates locations: ``grow``), or the worker is paused for this kind of traffic."""
        with self._lock:
            limit = self._held_cap if grow else self._held_max
            if held and self._held + held > limit:
                self.congested += 1
                return False
            total = nbytes + held
            if not total:
                return True
            if self._used < self._resume:
                self._push_paused = self._replicate_paused = False
            if self._used + total > self._pause_push:
                self._push_paused = True
            if self._used + total > self._pause_replicate:
                self._replicate_paused = True
            paused = self._replicate_paused if replicate else self._push_paused
            # an empty worker always takes one message, however large, so big records still get through
            if paused and self._used > 0:
                self.congested += 1
                return False
            self._take(total, held)
            return True

    def try_hold(self, nbytes: int) -> bool:
        """Take ``nbytes`` of held state unless it would pass its share (the data watermarks
        do not apply: a reservation is small and refusing it moves a whole shuffle)."""
        with self._lock:
            if self._held + nbytes > self._held_cap:
                self.congested += 1
                return False
            self._take(nbytes, nbytes)
            return True

    def _take(self, total: int, held: int) -> None:
        # lock held
        self._used += total
        self._held += held
        self._peak = max(self._peak, self._used)

    def release(self, nbytes: int, *, held: int = 0) -> None:
        """Give back ``nbytes`` of buffered data and ``held`` bytes of held state."""
        with self._lock:
            self._used = max(0, self._used - nbytes - held)
            self._held = max(0, self._held - held)
            if self._used < self._resume:
                self._push_paused = self._replicate_paused = False

    def level(self) -> float:
        return self._used / self.cap if self.cap else 0.0
