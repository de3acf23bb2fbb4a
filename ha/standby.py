"""``HotStandby``: a follower's copy of the master state, folded from the log as it grows.

A follower opens the ZooKeeper log read-only and folds every new batch, so
that it answers ``STATUS`` from current state and can take over quickly
(DESIGN §5, step 5). The watch only wakes the owner; the fold runs on the
owner's thread (the leadership recipe's control thread).

State: ``_state`` (a ``MasterState``) and the read-only view, guarded by
``_lock``: ``refold`` runs on the control thread, ``status`` on the RPC
server's.

Usage::

    standby = HotStandby(ZooKeeperEventLog(zk, "/croupier", writer=False))
    standby.watch(lambda: wake_up.set())       # on kazoo's thread: must not block
    standby.refold()                           # later, on the owner's thread
    body = standby.status({"role": "follower", "url": url})
    standby.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from croupier.core.codec import to_json
from croupier.core.decide import status_reply
from croupier.core.errors import CroupierError
from croupier.core.events import decode_event
from croupier.core.state import MasterState, apply
from croupier.ha.eventlog import LogCorrupted, LogTruncated
from croupier.ha.recovery import UNREPLAYABLE, load_state, unreplayable
from croupier.ha.zklog import ZooKeeperEventLog

__all__ = ["HotStandby"]

log = logging.getLogger(__name__)


class HotStandby:
    """The folded state behind a read-only view of the log.

    Parameters:
        view: a read-only ``ZooKeeperEventLog``; this object closes it.
        load: fold the log now, deferring a failure (``load=False`` leaves it to :meth:`load`,
            which raises).
    """

    def __init__(self, view: ZooKeeperEventLog, *, load: bool = True) -> None:
        self._view = view
        self._lock = threading.Lock()
        self._state = MasterState()
        self._broken_at = -1
        if load:
            self._reload()

    def load(self) -> None:
        """Fold the whole log now (a member's start-up: it fails fast rather than serve nothing).

        Raises:
            LogCorrupted: a snapshot or record passed its checksum but cannot be replayed.
            Unavailable: the log cannot be read.
        """
        with self._lock:
            self._state = load_state(self._view)

    def watch(self, callback: Callable[[], bool | None]) -> None:
        """Call ``callback()`` on kazoo's thread whenever the log changes (and once now),
        until it returns False.

        Raises:
            Unavailable: the watch could not be set.
        """
        self._view.watch(callback)

    def refold(self) -> None:
        """Fold what was appended since the last fold; reload everything if it was truncated.

        An unreachable log only defers the fold (the next watch or poll retries).
        """
        with self._lock:
            try:
                for seq, record in self._view.read(after=self._state.seq):
                    self._fold(seq, record)
            except LogTruncated:
                # a snapshot replaced the records this fold needed: start from it
                self._reload()
            except LogCorrupted as exc:
                self._report(exc)
            except CroupierError as exc:
                log.debug("follower fold deferred: %s", exc)

    def _fold(self, seq: int, record: bytes) -> None:
        try:
            apply(self._state, decode_event(record))
        except UNREPLAYABLE as exc:
            raise unreplayable(f"record {seq}", seq, exc) from exc
        self._state.seq = seq

    def _report(self, exc: LogCorrupted) -> None:
        # Once per place: the fold stops there, and every later watch would say it again.
        seq = int(exc.details.get("seq", 0))
        if seq != self._broken_at:
            self._broken_at = seq
            log.error("follower cannot fold the log (its STATUS stays at seq %d): %s", self._state.seq, exc)

    def _reload(self) -> None:
        try:
            self._state = load_state(self._view)
        except LogCorrupted as exc:
            self._report(exc)
        except CroupierError as exc:
            log.debug("follower reload deferred: %s", exc)

    def status(self, master: dict[str, Any]) -> dict[str, Any]:
        """The ``STATUS`` reply from the folded state; ``master`` becomes its ``master`` object
        (with the log's kind and the folded ``seq`` added)."""
        with self._lock:
            body: dict[str, Any] = to_json(status_reply(self._state))
            seq = self._state.seq
        body["master"] = {**master, "log": "ZooKeeperEventLog", "seq": seq}
        return body

    def close(self) -> None:
        """Close the view (idempotent)."""
        self._view.close()
