"""``AppThrottle``: per-app push rates over a sliding window; abnormal apps get ``CONGESTED``.

Each app with bytes in the window has a ring of ``buckets`` counters, each ``window /
buckets`` seconds wide: a PUSH adds its accepted bytes to the current one (O(1), no
allocation once the app is known). At most once per ``min(1 s, bucket width)`` the
first PUSH to arrive re-evaluates every app's rate (``core.throttle.window_rate``) and the
set of abnormal apps (``core.throttle.abnormal``), and forgets apps with no bytes left in
the window: memory is one ring per app active within the last window. A PUSH from a
throttled app is refused with ``CONGESTED`` (``details.throttled`` true) before its
digests are checked, so a refusal costs the worker little; nothing of it is counted,
so the app's rate falls while it is refused, and the throttle lifts at the first
evaluation where the app is no longer abnormal (at most about one window later).

Not thread-safe: ``check`` and ``record`` run on the push server's thread only.
``throttled`` may be read from any thread (it is replaced, never changed in place).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from croupier.core.errors import Congested
from croupier.core.throttle import ThrottleRule, abnormal, window_rate
from croupier.transports.log_context import id_fields

__all__ = ["AppThrottle"]

log = logging.getLogger(__name__)

BUCKETS = 30  # counters per window: 10 s each in the default 5 min window


@dataclass(slots=True)
class _Counter:
    """One app's ring: ``counts[i]`` bytes in bucket ``ids[i]`` (an absolute bucket number)."""

    first: int  # the bucket of its first counted push
    counts: list[int]
    ids: list[int]
    total: int = 0  # the bytes of every bucket in the ring
    expired: int = 0  # every bucket before this one is zero (or counted out of ``total``)

    def add(self, bucket: int, nbytes: int) -> None:
        i = bucket % len(self.counts)
        if self.ids[i] != bucket:
            self.total -= self.counts[i]
            self.counts[i] = 0
            self.ids[i] = bucket
        self.counts[i] += nbytes
        self.total += nbytes

    def expire(self, oldest: int) -> int:
        """Drop the buckets older than ``oldest``; the bytes left. O(1) when evaluated every
        bucket or more often (only the buckets since the last call are looked at)."""
        n = len(self.counts)
        if oldest - self.expired >= n:
            older = [i for i, b in enumerate(self.ids) if b < oldest]
        else:
            older = [b % n for b in range(self.expired, oldest) if self.ids[b % n] == b]
        for i in older:
            self.total -= self.counts[i]
            self.counts[i] = 0
        self.expired = max(self.expired, oldest)
        return self.total


class AppThrottle:
    """Parameters:
    window: seconds of pushes a rate covers (> 0).
    floor: bytes per second an app must exceed to be throttled.
    z: the z-score against the other apps it must exceed (``core.throttle``).
    buckets: counters per window.
    clock: monotonic seconds.

    Raises:
        ValueError: a setting that is not a positive number.
    """

    def __init__(
        self,
        window: float,
        floor: float,
        z: float,
        *,
        buckets: int = BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not window > 0 or buckets < 1:
            raise ValueError(f"throttle window must be positive, not {window!r}")
        self.rule = ThrottleRule(float(floor), float(z))
        self.rule.validate()
        self.window = float(window)
        self._buckets = buckets
        self._width = self.window / buckets
        self._every = min(1.0, self._width)
        self._clock = clock
        self._apps: dict[str, _Counter] = {}
        self._next = clock()
        self.throttled: dict[str, tuple[float, float]] = {}  # app: (rate, z) at the last evaluation
        self.rates: dict[str, float] = {}  # every active app's rate at the last evaluation

    def check(self, app_id: str) -> None:
        """Refuse a PUSH of ``app_id`` when the app is throttled.

        Raises:
            Congested: with ``details`` ``throttled`` (true), ``app_id``, ``rate`` (bytes/s),
                ``z``, ``floor`` and ``window``.
        """
        now = self._clock()
        if now >= self._next:
            self.evaluate(now)
        found = self.throttled.get(app_id)
        if found is None:
            return
        rate, z = found
        raise Congested(
            f"app {app_id} is throttled: it pushed {rate / 1e6:.4g} MB/s here over the last"
            f" {self.window:g} s, abnormal against the other apps (z {z:.1f} > {self.rule.z:g},"
            f" floor {self.rule.floor / 1e6:.4g} MB/s); retry later",
            {
                "throttled": True,
                "app_id": app_id,
                "rate": round(rate),
                "z": round(z, 2),
                "floor": round(self.rule.floor),
                "window": self.window,
            },
        )

    def record(self, app_id: str, nbytes: int) -> None:
        """Count ``nbytes`` accepted from ``app_id`` now."""
        bucket = int(self._clock() // self._width)
        counter = self._apps.get(app_id)
        if counter is None:
            counter = _Counter(bucket, [0] * self._buckets, [bucket] * self._buckets, expired=bucket)
            self._apps[app_id] = counter
        counter.add(bucket, nbytes)

    def evaluate(self, now: float) -> None:
        """Recompute every app's rate and which apps are throttled (``check`` calls it)."""
        self._next = now + self._every
        current = int(now // self._width)
        oldest = current - self._buckets + 1
        rates: dict[str, float] = {}
        for app_id, counter in list(self._apps.items()):
            left = counter.expire(oldest)
            if left <= 0:
                del self._apps[app_id]
                continue
            rates[app_id] = window_rate(
                left, now, oldest * self._width, counter.first * self._width, self._width
            )
        found = abnormal(rates, self.rule)
        for app_id in found.keys() - self.throttled.keys():
            log.warning(
                "throttling app %s: %.4g MB/s over %g s, z %.1f against %d other apps",
                app_id,
                rates[app_id] / 1e6,
                self.window,
                found[app_id],
                len(rates) - 1,
                extra=id_fields(app_id, None),
            )
        for app_id in self.throttled.keys() - found.keys():
            log.info(
                "app %s is no longer throttled (%.4g MB/s)",
                *(app_id, rates.get(app_id, 0.0) / 1e6),
                extra=id_fields(app_id, None),
            )
        self.rates = rates
        self.throttled = {app_id: (rates[app_id], z) for app_id, z in found.items()}
