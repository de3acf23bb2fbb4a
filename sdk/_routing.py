"""Where partitions live: a shuffle's routing table.

``WorkerAddress`` and ``PartitionLocation`` (one epoch of a partition, with
addresses) are the master's reply types from ``croupier.core.replies``.

State:
    ``Routing`` holds a shuffle's epoch-0 pairs, the worker addresses the master
    sent, and the newest location known for each revived partition. Writers of
    one ``Shuffle`` share it (a revive seen by one helps the others), so it is
    guarded by a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from croupier.core.replies import PartitionLocation, ShuffleSummary, WorkerAddress

__all__ = ["PartitionLocation", "Routing", "WorkerAddress"]


class Routing:
    """A shuffle's current location for every partition (thread-safe).

    Parameters:
        pairs: ``[primary, replica-or-None]`` worker ids; partition ``p`` is on
            ``pairs[p % len(pairs)]`` at epoch 0.
        workers: worker id -> address.
        revived: partition -> newest known location.
    """

    def __init__(
        self,
        pairs: Sequence[Sequence[str | None]],
        workers: Mapping[str, WorkerAddress],
        revived: Mapping[int, PartitionLocation] | None = None,
    ) -> None:
        if not pairs:
            raise ValueError("a shuffle has at least one worker pair")
        self._pairs = [(str(p[0]), None if p[1] is None else str(p[1])) for p in pairs]
        self._workers = dict(workers)
        self._revived = dict(revived or {})
        self._epoch0: dict[int, PartitionLocation] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_summary(cls, summary: ShuffleSummary) -> Routing:
        """Build from a GET_SHUFFLE / REGISTER_SHUFFLE reply (with ``workers`` and ``revived``)."""
        workers = dict(summary.workers or {})

        def addr(wid: str) -> WorkerAddress:
            return workers.get(wid) or WorkerAddress(wid)

        revived = {
            partition: PartitionLocation(epoch, addr(primary), addr(replica) if replica else None)
            for partition, epoch, primary, replica in summary.revived or ()
        }
        return cls(summary.pairs, workers, revived)

    def _address(self, wid: str) -> WorkerAddress:
        return self._workers.get(wid) or WorkerAddress(wid)

    def current(self, partition: int) -> PartitionLocation:
        """The newest location this process knows for ``partition``."""
        with self._lock:
            loc = self._revived.get(partition)
            if loc is not None:
                return loc
            # one PartitionLocation object per pair index keeps targets cheap to compare
            index = partition % len(self._pairs)
            loc = self._epoch0.get(index)
            if loc is None:
                primary, replica = self._pairs[index]
                loc = PartitionLocation(
                    0, self._address(primary), self._address(replica) if replica else None
                )
                self._epoch0[index] = loc
            return loc

    def update(self, partition: int, location: PartitionLocation) -> PartitionLocation:
        """Record a newer location; returns the newest known (an older one is ignored)."""
        with self._lock:
            old = self._revived.get(partition)
            if old is None or location.epoch > old.epoch:
                if location.epoch > 0 or old is not None:
                    self._revived[partition] = location
                for address in (location.primary, location.replica):
                    if (
                        address is not None
                        and address.known
                        and self._workers.get(address.worker_id) != address
                    ):
                        self._workers[address.worker_id] = address
                        self._epoch0.clear()  # rebuilt with the new address on demand
                return location
            return old
