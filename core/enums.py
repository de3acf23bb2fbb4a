"""The closed sets of wire strings that name a worker's status, a copy's role and a master's role.

They are ``StrEnum`` members, so each one *is* its wire string: JSON encodes
``WorkerStatus.ACTIVE`` as ``"active"`` and comparisons with plain strings
still hold. Pure values; no state, no threads.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CopyRole", "MasterRole", "WorkerStatus"]


class WorkerStatus(StrEnum):
    """Where a worker is in its life, as the master's state and replies name it.

    ``REMOVED`` never appears in the state: replies use it for a worker the
    master no longer knows (its address is then only the worker id). Nor does
    ``DRAINED``: STATUS rows and heartbeat replies name a ``DECOMMISSIONING`` worker
    so once no registered shuffle holds a slot on it (``core/decide.py``).
    """

    ACTIVE = "active"
    LOST = "lost"
    DECOMMISSIONING = "decommissioning"
    DRAINED = "drained"
    REMOVED = "removed"


class CopyRole(StrEnum):
    """Which copy of a partition's location a worker holds."""

    PRIMARY = "primary"
    REPLICA = "replica"


class MasterRole(StrEnum):
    """The role of one master, as ``STATUS`` reports it (``master.role``).

    STANDALONE: the embedded master (no ZooKeeper): it always serves.
    FOLLOWER: an HA member that folds the log and answers only ``STATUS``.
    LEADER: the HA member that took over the current term and serves every command.
    """

    STANDALONE = "standalone"
    FOLLOWER = "follower"
    LEADER = "leader"
