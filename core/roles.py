"""``MasterRole``: what a master is doing, as ``STATUS`` reports it (``master.role``).

The values are the wire strings; ``MasterRole`` is a ``StrEnum``, so a role
compares equal to its string and JSON-encodes as it.

Usage::

    if status["master"]["role"] == MasterRole.LEADER:
        ...
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MasterRole"]


class MasterRole(StrEnum):
    """The role of one master.

    STANDALONE: the embedded master (no ZooKeeper): it always serves.
    FOLLOWER: an HA member that folds the log and answers only ``STATUS``.
    LEADER: the HA member that took over the current term and serves every command.
    """

    STANDALONE = "standalone"
    FOLLOWER = "follower"
    LEADER = "leader"
