"""When a failed attempt is tried again, and whether its failure is logged: pure (issue 26).

The object-store offload (``dataplane/offload.py``) retries a failed upload, or a failed
report of one to the master, for as long as the copy is on the worker. The wait after the
``n``-th failure in a row doubles from ``first`` up to ``cap`` seconds: ``first * 2**(n-1)``,
never more than ``cap``. An outage of any length therefore costs one attempt per ``cap``
seconds per copy once it has lasted a while, and a store that comes back is tried again within
``cap`` seconds.

The failures of one copy are logged at WARNING the first time and then ever more rarely: on the
``n``-th failure when ``n`` is a power of two (1, 2, 4, 8, ...); the others are logged at DEBUG.
A copy failing every ``cap`` seconds for an hour is logged about seven times, not 120.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryBackoff"]


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """Capped exponential backoff: ``first`` seconds after a first failure, doubling to ``cap``."""

    first: float = 1.0
    cap: float = 30.0

    def __post_init__(self) -> None:
        if not (0 < self.first <= self.cap):
            raise ValueError(f"backoff needs 0 < first <= cap, got first={self.first}, cap={self.cap}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (``failures`` >= 1)."""
        if failures < 1:
            raise ValueError(f"failures counts from 1, got {failures}")
        # 2**64 * first is past any cap: no need to compute bigger powers
        return min(self.cap, self.first * 2.0 ** min(failures - 1, 64))

    @staticmethod
    def loud(failures: int) -> bool:
        """Whether the ``failures``-th failure in a row is logged at WARNING (a power of two)."""
        return failures >= 1 and failures & (failures - 1) == 0
