"""``MemoryLimiter``: a worker's budget for buffered push data (DESIGN §7.4).

Bytes are counted from the moment a push is accepted until its flush to disk
completes. Above the *push* watermark (0.85 of the cap) pushes are answered
``CONGESTED``; above the *replicate* watermark (0.95) replication is too. Once
paused, the worker resumes below 0.7, so it does not flap at the edge. The
client backs off and resends the same batches: a worker never runs out of memory
because clients push too fast.
"""

from __future__ import annotations

import threading

__all__ = ["MemoryLimiter"]


class MemoryLimiter:
    """Thread-safe counter with hysteresis.

    Parameters:
        cap: bytes of buffered data the worker may hold.
        pause_push, pause_replicate, resume: fractions of ``cap``.
    """

    def __init__(
        self, cap: int, *, pause_push: float = 0.85, pause_replicate: float = 0.95, resume: float = 0.7
    ) -> None:
        self.cap = cap
        self._pause_push = int(cap * pause_push)
        self._pause_replicate = int(cap * pause_replicate)
        self._resume = int(cap * resume)
        self._used = 0
        self._peak = 0
        self._push_paused = False
        self._replicate_paused = False
        self._lock = threading.Lock()
        self.congested = 0

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        return self._peak

    def try_acquire(self, nbytes: int, *, replicate: bool = False) -> bool:
        """Take ``nbytes`` unless the worker is paused for this kind of traffic."""
        with self._lock:
            if self._used < self._resume:
                self._push_paused = self._replicate_paused = False
            if self._used + nbytes > self._pause_push:
                self._push_paused = True
            if self._used + nbytes > self._pause_replicate:
                self._replicate_paused = True
            paused = self._replicate_paused if replicate else self._push_paused
            # an empty worker always takes one message, however large, so big records still get through
            if paused and self._used > 0:
                self.congested += 1
                return False
            self._used += nbytes
            self._peak = max(self._peak, self._used)
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used = max(0, self._used - nbytes)
            if self._used < self._resume:
                self._push_paused = self._replicate_paused = False

    def level(self) -> float:
        return self._used / self.cap if self.cap else 0.0
