"""``ObjectJanitor``: the master's deletions in the object store (issue 26).

Workers delete a shuffle's objects when ``DESTROY`` reaches them, but a shuffle that outlived
every worker (the scale-to-zero case) has no worker left to do it. A master run with
``--object-store`` therefore deletes them itself:

- **on unregister and expiry**: the objects under ``<app>/`` (or ``<app>/<shuffle>/``) go
  once the event is folded, whether or not any worker is alive (deleting twice is harmless);
- **the orphan sweep**: every ``orphan_interval`` the leader lists the cluster's prefix and
  deletes the objects of apps it does not know (``croupier.core.sweep`` decides which: never a
  live app's, never a prefix that holds anything but Croupier's layout, never one with an
  object younger than ``orphan_grace``). It sweeps only once its log is loaded and its
  take-over grace is over, and only under its own prefix: a second cluster in the same bucket
  needs a prefix of its own (nested inside this one's, it is left alone: its keys are not
  Croupier's layout at this level).

State: the live app ids (kept in step with the fold by the master actor, behind a lock; None
until the log is loaded: no sweep before), one thread working a bounded queue of deletions and
sweeps, and counters for the metrics. A failed deletion is logged and counted; the sweep
removes what it left, once the app is gone and the grace is over.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable

from croupier.core.sweep import orphan_apps
from croupier.transports.objstore import ObjectStore, ObjectStoreError, app_prefix

__all__ = ["ObjectJanitor"]

log = logging.getLogger(__name__)

_QUEUE = 10_000  # deletions waiting; past it one is dropped (logged; the sweep gets it later)


class ObjectJanitor:
    """Parameters:
    store: the cluster's object store (``s3://BUCKET/PREFIX``); closed by ``close()``.
    grace: seconds an unknown app's newest object must have aged before the sweep deletes it.
    interval: seconds between sweeps (0: never sweep).
    """

    def __init__(self, store: ObjectStore, *, grace: float, interval: float) -> None:
        self.store = store
        self.grace = grace
        self.interval = interval
        self._lock = threading.Lock()
        self._live: set[str] | None = None
        self._last_sweep: float | None = None
        self._queue: queue.Queue[tuple[str, str, int | None, float] | None] = queue.Queue(_QUEUE)
        self.deleted_objects = 0
        self.swept_apps = 0
        self.swept_objects = 0
        self.sweeps = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="object-janitor", daemon=True)
        self._thread.start()

    # -- the master actor's calls (its thread) ---------------------------------------------------
    def reset(self, apps: Iterable[str]) -> None:
        """The live apps, once the log is loaded (or reloaded)."""
        with self._lock:
            self._live = set(apps)

    def registered(self, app_id: str) -> None:
        with self._lock:
            if self._live is not None:
                self._live.add(app_id)

    def delete(self, app_id: str, shuffle_id: int | None) -> None:
        """Delete a shuffle's objects (None: the app's, which is gone)."""
        if shuffle_id is None:
            with self._lock:
                if self._live is not None:
                    self._live.discard(app_id)
        self._put(("delete", app_id, shuffle_id, 0.0))

    def tick(self, now: float) -> None:
        """Sweep for orphans if ``interval`` has passed since the last sweep."""
        if self.interval <= 0:
            return
        with self._lock:
            last = self._last_sweep
            due = self._live is not None and (last is None or now - last >= self.interval)
            if due:
                self._last_sweep = now
        if due:
            self._put(("sweep", "", None, now))

    def stats(self) -> dict[str, int]:
        return {
            "deleted_objects": self.deleted_objects,
            "swept_apps": self.swept_apps,
            "swept_objects": self.swept_objects,
            "sweeps": self.sweeps,
            "failures": self.failures,
        }

    def close(self) -> None:
        """Stop after the queued work (what is left to delete then is the sweep's)."""
        try:
            self._queue.put(None, timeout=5)
        except queue.Full:
            log.warning("object janitor: stopping with deletions queued; the orphan sweep will get them")
        self._thread.join(30)
        self.store.close()

    # -- the janitor's thread --------------------------------------------------------------------
    def _put(self, item: tuple[str, str, int | None, float]) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.failures += 1
            log.warning("object janitor: %d deletions queued; dropped %s (the sweep gets it)", _QUEUE, item)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            what, app_id, shuffle_id, now = item
            try:
                if what == "delete":
                    self._delete(app_id, shuffle_id)
                else:
                    self._sweep(now)
            except ObjectStoreError as exc:
                self.failures += 1
                log.warning("object janitor: %s failed: %s", what, exc)
            except Exception:  # the janitor must outlive a bug in one deletion
                self.failures += 1
                log.exception("object janitor: %s failed", what)

    def _delete(self, app_id: str, shuffle_id: int | None) -> None:
        prefix = app_prefix(app_id) + ("" if shuffle_id is None else f"{shuffle_id}/")
        keys = [o.key for o in self.store.walk(prefix)]
        self.store.delete(keys)
        self.deleted_objects += len(keys)
        if keys:
            log.info("deleted %d objects under %s", len(keys), prefix)

    def _sweep(self, now: float) -> None:
        with self._lock:
            live = set(self._live or ())
        self.sweeps += 1
        for app_id in orphan_apps(((o.key, o.modified) for o in self.store.walk()), live, now, self.grace):
            # asked again just before: the listing took a while, the app may be registered now
            objects = self.store.list(app_prefix(app_id))
            with self._lock:
                alive = self._live is None or app_id in self._live
            if alive or orphan_apps(((o.key, o.modified) for o in objects), (), now, self.grace) != [app_id]:
                continue
            self.store.delete([o.key for o in objects])
            self.swept_apps += 1
            self.swept_objects += len(objects)
            log.warning("orphan sweep: deleted %d objects of unknown app %s", len(objects), app_id)
