"""Fencing a leader's writes to ZooKeeper: ``Fence``, ``Fenced`` and the checks of a transaction.

Every write of a fenced event log (``croupier.ha.zklog``) is one ZooKeeper transaction that
first checks that the writer lock is still ours, that ``<root>/epoch`` is still at the leader's
term and that its election node still exists. A deposed leader's write then fails as a whole
(``Fenced``) and nothing of it is applied (DESIGN §5, STYLE 5).

Usage::

    tx = zk.transaction()
    labels = add_checks(tx, fence, epoch_path="/croupier/epoch",
                        writer_path="/croupier/writer", writer_version=0)
    tx.create("/croupier/log/batch-", data, sequence=True)
    calls.commit(tx, labels, "the append")        # ZkCalls: Fenced if a check failed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from croupier.core.errors import NotLeader

__all__ = ["Fence", "Fenced", "add_checks"]


@dataclass(frozen=True)
class Fence:
    """What a leader's writes are fenced by: the term it set and the election node it won with.

    Parameters:
        epoch_version: the version of ``<root>/epoch`` after the leader bumped it (its term).
        election_node: the full path of the leader's ephemeral election znode.
        election_version: that node's data version (0 unless someone set its data).
    """

    epoch_version: int
    election_node: str
    election_version: int = 0


class Fenced(NotLeader):
    """A fenced write failed: ``/epoch`` moved on, or the election or writer node is gone.

    This master was deposed (or its session expired); nothing of the write
    was applied. Step down; never retry the write.
    """


def add_checks(
    tx: Any, fence: Fence | None, *, epoch_path: str, writer_path: str, writer_version: int | None
) -> list[str]:
    """Add the writer lock's check (when held) and the fence's checks to ``tx``; returns what
    each check means when it fails, in order."""
    labels = []
    if writer_version is not None:
        tx.check(writer_path, writer_version)
        labels.append(f"the writer lock {writer_path} is no longer ours (the ZooKeeper session expired?)")
    if fence is not None:
        tx.check(epoch_path, fence.epoch_version)
        labels.append(f"{epoch_path} is no longer at version {fence.epoch_version}: another master took over")
        tx.check(fence.election_node, fence.election_version)
        labels.append(f"the election node {fence.election_node} is gone (session expired or withdrew)")
    return labels
