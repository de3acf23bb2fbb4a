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

from kazoo.exceptions import KazooException, NoNodeError

from croupier.core.errors import Unavailable

__all__ = ["ElectionNodeGone", "LeaderElection"]

log = logging.getLogger(__name__)

PREFIX = "n_"


class ElectionNodeGone(Unavailable):
    """This contender's node is gone (its session expired, or it withdrew): join again."""


class LeaderElection:
    """One contender.

    State:
        node: the path of this contender's znode, or None before ``join``.

    Parameters:
        zk: a started ``KazooClient`` (owned by the caller).
        root: the ensemble's root; contenders live under ``<root>/election``.
        identifier: stored in the node; others read it (the leader's URL).

    Every method translates kazoo's errors: ZooKeeper unreachable becomes ``Unavailable``.
    """

    def __init__(self, zk: Any, root: str, identifier: str) -> None:
        self._zk = zk
        self.path = root.rstrip("/") + "/election"
        self.identifier = identifier
        self.node: str | None = None
        self._changed = threading.Event()
        self._zk_errors = (KazooException, zk.handler.timeout_exception)

    def join(self) -> str:
        """Create this contender's node; returns its path.

        A node this session left behind (a create whose reply was lost) is deleted
        first: it would stand ahead of the new one forever and block the election.

        Raises:
            Unavailable: ZooKeeper could not be reached; join again later.
        """
        try:
            self._zk.ensure_path(self.path)
            self._drop_leftovers()
            self.node = self._zk.create(
                f"{self.path}/{PREFIX}", self.identifier.encode(), ephemeral=True, sequence=True
            )
        except self._zk_errors as exc:
            raise Unavailable(f"cannot join the election under {self.path}: {_describe(exc)}") from exc
        log.info("joined the election as %s", self.node)
        return self.node

    def _drop_leftovers(self) -> None:
        client_id = self._zk.client_id
        if client_id is None:
            return
        for name in self._zk.get_children(self.path):
            try:
                data, stat = self._zk.get(f"{self.path}/{name}")
                if stat.ephemeralOwner == client_id[0] and data == self.identifier.encode():
                    log.info("deleting %s/%s, left behind by this session", self.path, name)
                    self._zk.delete(f"{self.path}/{name}", version=stat.version)
            except NoNodeError:
                continue

    def withdraw(self) -> None:
        """Leave the election (idempotent; the node also goes with the session)."""
        node, self.node = self.node, None
        if node is not None:
            try:
                self._zk.delete(node)
            except NoNodeError:
                pass  # gone with its session already
            except self._zk_errors as exc:  # unreachable: the node goes when the session expires
                log.info("could not delete %s (it goes with the session): %s", node, _describe(exc))
        self._changed.set()

    def contenders(self) -> list[tuple[str, str]]:
        """(node name, identifier) of every contender, leader first.

        Raises:
            Unavailable: ZooKeeper could not be reached.
        """
        out = []
        try:
            for name in sorted(self._zk.get_children(self.path), key=_seq):
                try:
                    data, _ = self._zk.get(f"{self.path}/{name}")
                except NoNodeError:
                    continue
                out.append((name, data.decode()))
        except self._zk_errors as exc:
            raise Unavailable(f"cannot list the election under {self.path}: {_describe(exc)}") from exc
        return out

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this contender leads (True) or ``timeout`` passes (False).

        Raises:
            ElectionNodeGone: this contender's node is gone (or it never joined); join again.
            Unavailable: ZooKeeper could not be reached; the node may still be there.
        """
        try:
            return self._wait(timeout)
        except NoNodeError as exc:
            raise ElectionNodeGone(f"{self.node} is gone (the session expired)") from exc
        except self._zk_errors as exc:
            raise Unavailable(f"cannot watch the election under {self.path}: {_describe(exc)}") from exc

    def _wait(self, timeout: float | None) -> bool:
        while True:
            node = self.node
            if node is None:
                raise NoNodeError("this contender has not joined (or withdrew)")
            self._changed.clear()
            names = sorted(self._zk.get_children(self.path), key=_seq)
            mine = node.rsplit("/", 1)[1]
            if mine not in names:
                raise NoNodeError(f"{node} is gone")
            index = names.index(mine)
            if index == 0:
                return True
            predecessor = f"{self.path}/{names[index - 1]}"
            # exists() with a watch: fires when the predecessor goes (or is already gone)
            if self._zk.exists(predecessor, watch=lambda _event: self._changed.set()) is None:
                continue
            if not self._changed.wait(timeout):
                return False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _seq(name: str) -> int:
    try:
        return int(name.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return 1 << 62
