"""``Identity``: who this worker process is, and the incarnation fence (DESIGN §10).

Immutable, so any server thread may use it. Every process start gets a fresh
incarnation; a request that names another one was meant for an earlier life of the
worker, whose memory is gone, and gets ``STALE_LOCATION``.
"""

from __future__ import annotations

from dataclasses import dataclass

from croupier.core.errors import StaleLocation

__all__ = ["Identity"]


@dataclass(frozen=True, slots=True)
class Identity:
    """Parameters:
    worker_id: the persistent worker id.
    incarnation: this process start's id.
    """

    worker_id: str
    incarnation: str

    def check(self, incarnation: str) -> None:
        """Refuse a request that names another incarnation.

        Raises:
            StaleLocation: ``incarnation`` is not this process's; the details name the current one.
        """
        if incarnation != self.incarnation:
            raise StaleLocation(
                f"worker {self.worker_id} is incarnation {self.incarnation}, not {incarnation}: "
                "it restarted and lost what it held in memory",
                {"worker_id": self.worker_id, "incarnation": self.incarnation},
            )
