"""``PushedBytes``: the bytes pushed to this worker as primary, per (app, shuffle), until commit.

The worker reports the largest entries in each WORKER_HEARTBEAT (``pushed``) and the master
sums them per tenant into its bytes in flight (``croupier.core.quotas``). An entry goes when
the shuffle's files are committed here or the shuffle is destroyed (or found an orphan).

State: a dict under a lock; ``add`` runs on the push server thread, ``drop`` on the control
server's, ``report`` on the heartbeat thread.
"""

from __future__ import annotations

import heapq
import threading

from croupier.core.commands import MAX_HELD

__all__ = ["PushedBytes"]


class PushedBytes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: dict[tuple[str, int], int] = {}

    def add(self, app_id: str, shuffle_id: int, nbytes: int) -> None:
        key = (app_id, shuffle_id)
        with self._lock:
            self._bytes[key] = self._bytes.get(key, 0) + nbytes

    def drop(self, app_id: str, shuffle_id: int | None) -> None:
        """Forget a shuffle (or, with ``shuffle_id`` None, every shuffle of the app)."""
        with self._lock:
            for key in [k for k in self._bytes if k[0] == app_id and shuffle_id in (None, k[1])]:
                del self._bytes[key]

    def report(self, limit: int = MAX_HELD) -> tuple[tuple[str, int, int], ...]:
        """The ``limit`` largest entries as ``(app, shuffle, bytes)``, for a heartbeat."""
        with self._lock:
            items = list(self._bytes.items())
        top = heapq.nlargest(limit, items, key=lambda kv: kv[1])
        return tuple((a, s, n) for (a, s), n in sorted(top))
