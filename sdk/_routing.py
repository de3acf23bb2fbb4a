"""Where partitions live: worker addresses, locations, and a shuffle's routing table.

State:
    ``Routing`` holds a shuffle's epoch-0 pairs, the worker addresses the master
    sent, and the newest location known for each revived partition. Writers of
    one ``Shuffle`` share it (a revive seen by one helps the others), so it is
    guarded by a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Location", "Routing", "WorkerAddress", "location_from_reply"]


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    """One worker's endpoints. ``host == ""`` when the master no longer knows the worker."""

    worker_id: str
    host: str = ""
    push_port: int = 0
    replicate_port: int = 0
    fetch_port: int = 0
    incarnation: str = ""
    status: str = "removed"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerAddress:
        return cls(
            worker_id=str(data["worker_id"]),
            host=str(data.get("host", "")),
            push_port=int(data.get("push_port", 0)),
            replicate_port=int(data.get("replicate_port", 0)),
            fetch_port=int(data.get("fetch_port", 0)),
            incarnation=str(data.get("incarnation", "")),
            status=str(data.get("status", "removed")),
        )

    @property
    def known(self) -> bool:
        """Whether the master still has an address for this worker."""
        return bool(self.host) and self.status != "removed"

    @property
    def push_url(self) -> str:
        return f"tcp://{self.host}:{self.push_port}"

    @property
    def replicate_url(self) -> str:
        return f"tcp://{self.host}:{self.replicate_port}"

    @property
    def fetch_url(self) -> str:
        return f"tcp://{self.host}:{self.fetch_port}"


@dataclass(frozen=True, slots=True)
class Location:
    """One epoch of a partition: a primary and an optional replica."""

    epoch: int
    primary: WorkerAddress
    replica: WorkerAddress | None

    @property
    def target(self) -> tuple[str, str, str | None, str | None]:
        """Pushes to locations with the same target may share one message."""
        r = self.replica
        return (
            self.primary.worker_id,
            self.primary.incarnation,
            r.worker_id if r else None,
            r.incarnation if r else None,
        )

    @property
    def workers(self) -> list[str]:
        return [self.primary.worker_id] + ([self.replica.worker_id] if self.replica else [])


def location_from_reply(entry: Mapping[str, Any]) -> Location:
    """Parse one ``locations`` entry of a locations reply (PROTOCOL §4)."""
    replica = entry.get("replica")
    return Location(
        int(entry["epoch"]),
        WorkerAddress.from_json(entry["primary"]),
        WorkerAddress.from_json(replica) if replica else None,
    )


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
        revived: Mapping[int, Location] | None = None,
    ) -> None:
        if not pairs:
            raise ValueError("a shuffle has at least one worker pair")
        self._pairs = [(str(p[0]), None if p[1] is None else str(p[1])) for p in pairs]
        self._workers = dict(workers)
        self._revived = dict(revived or {})
        self._epoch0: dict[int, Location] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_summary(cls, reply: Mapping[str, Any]) -> Routing:
        """Build from a GET_SHUFFLE / REGISTER_SHUFFLE reply (with ``workers`` and ``revived``)."""
        workers = {str(w): WorkerAddress.from_json(a) for w, a in reply.get("workers", {}).items()}

        def addr(wid: str | None) -> WorkerAddress | None:
            if wid is None:
                return None
            return workers.get(wid) or WorkerAddress(wid)

        revived: dict[int, Location] = {}
        for partition, epoch, primary, replica in reply.get("revived", []):
            primary_addr = addr(primary)
            assert primary_addr is not None
            revived[int(partition)] = Location(int(epoch), primary_addr, addr(replica))
        return cls(reply["pairs"], workers, revived)

    def _address(self, wid: str) -> WorkerAddress:
        return self._workers.get(wid) or WorkerAddress(wid)

    def current(self, partition: int) -> Location:
        """The newest location this process knows for ``partition``."""
        with self._lock:
            loc = self._revived.get(partition)
            if loc is not None:
                return loc
            # one Location object per pair index keeps targets cheap to compare
            index = partition % len(self._pairs)
            loc = self._epoch0.get(index)
            if loc is None:
                primary, replica = self._pairs[index]
                loc = Location(0, self._address(primary), self._address(replica) if replica else None)
                self._epoch0[index] = loc
            return loc

    def update(self, partition: int, location: Location) -> Location:
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
