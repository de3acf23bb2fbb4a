"""Leader election over ZooKeeper: ephemeral sequential contenders, lowest wins.

Each master creates ``<root>/election/n_<seq>`` (ephemeral, sequential) holding
its RPC URL, and watches only its predecessor, so a departure wakes one
contender, not all of them. The node's path is also the fencing token: every
append by the leader checks in one transaction that the node still exists (its
session is alive) and that ``<root>/epoch`` still has the version the leader
set when it took over.

Unlike kazoo's ``Election.run()``, this tells its owner when leadership is lost:
the node disappears with the session (``KazooState.LOST``), and the owner
withdraws and joins again at the back.

Usage::

    election = LeaderElection(zk, "/croupier", "tcp://10.0.0.1:9097")
    election.join()
    if election.wait(timeout=5.0):          # True once this contender leads
        ...                                 # take over, fenced by election.node
    election.withdraw()
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.exceptions import NoNodeError

__all__ = ["LeaderElection"]

log = logging.getLogger(__name__)

PREFIX = "n_"


class LeaderElection:
    """One contender.

    State:
        node: the path of this contender's znode, or None before ``join``.

    Parameters:
        zk: a started ``KazooClient`` (owned by the caller).
        root: the ensemble's root; contenders live under ``<root>/election``.
        identifier: stored in the node; others read it (the leader's URL).
    """

    def __init__(self, zk: Any, root: str, identifier: str) -> None:
        self._zk = zk
        self.path = root.rstrip("/") + "/election"
        self.identifier = identifier
        self.node: str | None = None
        self._changed = threading.Event()

    def join(self) -> str:
        """Create this contender's node; returns its path."""
        self._zk.ensure_path(self.path)
        self.node = self._zk.create(
            f"{self.path}/{PREFIX}", self.identifier.encode(), ephemeral=True, sequence=True
        )
        log.info("joined the election as %s", self.node)
        return self.node

    def withdraw(self) -> None:
        """Leave the election (idempotent; the node also goes with the session)."""
        node, self.node = self.node, None
        if node is not None:
            try:
                self._zk.delete(node)
            except NoNodeError:
                pass
            except Exception as exc:  # the session may be gone already: the node goes with it
                log.debug("could not delete %s: %s", node, exc)
        self._changed.set()

    def contenders(self) -> list[tuple[str, str]]:
        """(node name, identifier) of every contender, leader first."""
        out = []
        for name in sorted(self._zk.get_children(self.path), key=_seq):
            try:
                data, _ = self._zk.get(f"{self.path}/{name}")
            except NoNodeError:
                continue
            out.append((name, data.decode()))
        return out

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this contender leads (True) or ``timeout`` passes (False).

        Raises:
            NoNodeError: this contender's node is gone; join again.
        """
        while True:
            if self.node is None:
                return False
            self._changed.clear()
            names = sorted(self._zk.get_children(self.path), key=_seq)
            mine = self.node.rsplit("/", 1)[1]
            if mine not in names:
                raise NoNodeError(f"{self.node} is gone (the session expired)")
            index = names.index(mine)
            if index == 0:
                return True
            predecessor = f"{self.path}/{names[index - 1]}"
            # exists() with a watch: fires when the predecessor goes (or is already gone)
            if self._zk.exists(predecessor, watch=lambda _event: self._changed.set()) is None:
                continue
            if not self._changed.wait(timeout):
                return False


def _seq(name: str) -> int:
    try:
        return int(name.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return 1 << 62
