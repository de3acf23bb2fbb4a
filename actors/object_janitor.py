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
  Croupier's layout at this level). Two clusters given the *same* prefix would sweep each
  other's apps: the master claims the prefix for its cluster once its log is loaded and before
  each sweep (``core.sweep``'s claims), and skips every sweep, with a warning, while another
  cluster's claim is there.

State: the live app ids (kept in step with the fold by the master actor, behind a lock; None
until the log is loaded: no sweep before), one thread working a bounded queue of deletions and
sweeps, and counters for the metrics. A failed deletion is logged and counted; the sweep
removes what it left, once the app is gone and the grace is over.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import secrets
import socket
import threading
from collections.abc import Iterable

from croupier.core.sweep import CLAIMS, claim_key, orphan_apps, rival_claims
from croupier.transports.objstore import ObjectStore, ObjectStoreError, app_prefix

__all__ = ["ObjectJanitor"]

log = logging.getLogger(__name__)

_QUEUE = 10_000  # deletions waiting; past it one is dropped (logged; the sweep gets it later)


class ObjectJanitor:
    """Parameters:
    store: the cluster's object store (``s3://BUCKET/PREFIX``); closed by ``close()``.
    grace: seconds an unknown app's newest object must have aged before the sweep deletes it.
    interval: seconds between sweeps (0: never sweep).
    cluster: this cluster's id in its sweep claims (lowercase hex), the same on every master of
        the cluster and across restarts; None: a random one (a master whose log is in memory).
    """

    def __init__(
        self, store: ObjectStore, *, grace: float, interval: float, cluster: str | None = None
    ) -> None:
        self.store = store
        self.grace = grace
        self.interval = interval
        self.cluster = cluster if cluster is not None else secrets.token_hex(8)
        self._claim = claim_key(self.cluster)  # a bad id fails here, not at the first sweep
        self._claim_written = False
        self._claim_tried = float("-inf")
        self.sweeps_skipped = 0
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
        """The live apps, once the log is loaded (or reloaded); the next tick claims the prefix."""
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
        """Sweep for orphans if ``interval`` has passed since the last sweep; claim the prefix
        again (once a minute) while the claim could not be written."""
        with self._lock:
            retry = self._live is not None and not self._claim_written and now - self._claim_tried >= 60
            if retry:
                self._claim_tried = now
        if retry:
            self._put(("claim", "", None, now))
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
            "sweeps_skipped": self.sweeps_skipped,
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
                elif what == "claim":
                    self._write_claim()
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

    def _write_claim(self) -> None:
        body = {"cluster": self.cluster, "host": socket.gethostname(), "pid": os.getpid()}
        self.store.put(self._claim, json.dumps(body).encode())
        self._claim_written = True

    def _claimed(self) -> bool:
        """Claim the prefix for this cluster; False (logged) while another cluster's claim is
        there too: the two would take each other's apps for orphans."""
        self._write_claim()
        rivals = rival_claims((o.key for o in self.store.list(CLAIMS)), self.cluster)
        if not rivals:
            return True
        self.sweeps_skipped += 1
        log.warning(
            "orphan sweep skipped: %s holds other clusters' sweep claims besides this one's "
            "(%s): two clusters on one prefix would delete each other's shuffles, so none "
            "sweeps. Give each cluster its own prefix; a cluster that is gone (or this one's "
            "old identity, after its data dir or ZooKeeper URL changed) is retired by deleting "
            "its claim object.",
            self.store.url,
            ", ".join(rivals[:5]) + (f" and {len(rivals) - 5} more" if len(rivals) > 5 else ""),
        )
        return False

    def _sweep(self, now: float) -> None:
        with self._lock:
            live = set(self._live or ())
        if not self._claimed():
            return
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
