"""A worker as STATUS rows and heartbeat replies show it (pure; used by ``croupier.core.decide``)."""

from __future__ import annotations

from croupier.core.enums import WorkerStatus
from croupier.core.replies import WorkerRow
from croupier.core.state import WorkerInfo

__all__ = ["shown_status", "worker_row"]


def shown_status(w: WorkerInfo) -> WorkerStatus:
    """A worker's status as STATUS rows and heartbeat replies show it: a decommissioning
    worker that no registered shuffle holds a slot on (``used_slots`` 0: every shuffle placed
    or revived on it was unregistered or expired) is ``drained``, and may exit."""
    if w.status == WorkerStatus.DECOMMISSIONING and w.used_slots == 0:
        return WorkerStatus.DRAINED
    return w.status


def worker_row(w: WorkerInfo) -> WorkerRow:
    """A worker as a STATUS row (its status as ``shown_status`` gives it)."""
    return WorkerRow(
        *(w.worker_id, w.host, w.control_port, w.push_port, w.replicate_port, w.fetch_port),
        *(w.incarnation, shown_status(w)),
        slots=w.slots,
        used_slots=w.used_slots,
        excluded=w.excluded,
    )
