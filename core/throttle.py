"""Abnormal-app throttling: which apps push abnormally fast (issue 14; vivo's rule). Pure.

A worker measures each app's **push rate**: the bytes it accepted from that app on PUSH
over a sliding window, per second (``dataplane/throttle.py`` keeps the counters). From the
rates of the *active* apps (those with accepted bytes in the window) an app is
**abnormal** when both

- its rate exceeds ``floor`` (bytes per second), and
- its z-score against the **other** active apps exceeds ``z``::

      z(a) = (rate(a) - mean(others)) / max(std(others), floor * MIN_STD_SHARE)

  ``mean`` and ``std`` (population standard deviation) are over every active app but
  ``a`` itself (leave-one-out, so that a flooder does not inflate the spread it is
  measured against).

The edge cases, decided here:

- **No other active app**: the app is never abnormal (it has no z-score). There is no
  one to protect; the worker's memory cap still answers ``CONGESTED`` when it fills.
- **One other app**, or others whose rates are (nearly) equal: their std is (about) 0,
  so the minimum ``floor * MIN_STD_SHARE`` applies. With the defaults (z 3, share 1/3)
  an app is then abnormal when it exceeds the floor *and* the others' mean by more than
  the floor: 1 GB/s against one app at 900 MB/s is not abnormal, 1 GB/s against one at
  10 MB/s is.
- **Equal rates** are never abnormal (z = 0), however high.
- Two equal flooders mask each other: each one's z against {the other, the quiet apps}
  stays low. A leave-one-out z-score finds *an* outlier, not a group of them.

Rates are in bytes per second; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MIN_STD_SHARE", "ThrottleRule", "abnormal", "window_rate", "z_scores"]

MIN_STD_SHARE = 1.0 / 3.0
"""The other apps' standard deviation counts as at least this share of the floor."""


@dataclass(frozen=True, slots=True)
class ThrottleRule:
    """Parameters:
    floor: bytes per second; an app at or under it is never abnormal.
    z: the z-score an app's rate must exceed against the other apps.
    """

    floor: float
    z: float

    def validate(self) -> None:
        """Raises:
        ValueError: the floor or z is not a positive finite number.
        """
        for name, value in (("floor", self.floor), ("z", self.z)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"throttle {name} must be a positive number, not {value!r}")


def z_scores(rates: Mapping[str, float], floor: float) -> dict[str, float]:
    """Each app's z-score against the other apps of ``rates`` (leave-one-out).

    Apps with a rate of 0 or less are not active and take no part. An app with no other
    active app has no z-score (it is absent from the result). O(len(rates)).
    """
    active = [(app, float(r)) for app, r in rates.items() if r > 0]
    n = len(active)
    if n < 2:
        return {}
    total = math.fsum(r for _, r in active)
    squares = math.fsum(r * r for _, r in active)
    min_std = floor * MIN_STD_SHARE
    out: dict[str, float] = {}
    for app, r in active:
        others = n - 1
        mean = (total - r) / others
        variance = max(0.0, (squares - r * r) / others - mean * mean)
        out[app] = (r - mean) / max(math.sqrt(variance), min_std)
    return out


def abnormal(rates: Mapping[str, float], rule: ThrottleRule) -> dict[str, float]:
    """The abnormal apps of ``rates`` (see the module doc), each with its z-score."""
    return {
        app: z for app, z in z_scores(rates, rule.floor).items() if rates[app] > rule.floor and z > rule.z
    }


def window_rate(window_bytes: int, now: float, oldest: float, first_seen: float, least: float) -> float:
    """Bytes per second of ``window_bytes`` counted since ``max(oldest, first_seen)``.

    ``oldest`` is when the window's oldest counter began, ``first_seen`` when the app's
    first counted push began: an app seen for 10 s of a 5 min window has its bytes
    divided by 10 s, not by 300 s. The span is at least ``least`` seconds (one counter's
    width), so that a first burst does not read as an enormous rate.
    """
    span = max(least, now - max(oldest, first_seen))
    return window_bytes / span
