"""``Reservations``: the locations the master placed on this worker (PROTOCOL §5.2 ``RESERVE``).

The master sends a ``RESERVE`` for every shuffle and every revived location it places
here, before any writer learns of them. PUSH and REPLICATE are checked against them
before anything is stored, so a worker keeps only data the master knows where to find.

State (behind one lock): per (app, shuffle) its size, whether it is replicated, the
epoch-0 pairs that name this worker (by index in the shuffle's ``pairs``), the revived
locations that name it, and the sequence number of its last ``RESERVE`` (the orphan
sweep uses it). Written by the control server thread (``reserve``, ``forget``), read by
the push and replicate server threads (``check_push``, ``check_replicate``).

Kept in memory only: a restarted worker has a new incarnation, and every push naming the
old one is refused anyway. Bounded by count and by the memory limiter: at most ``cap``
entries, a shuffle and each revived location counting one; each entry, and each of a
shuffle's pairs that names this worker, holds ``RESERVATION_BYTES`` of the limiter until
it is forgotten. A ``RESERVE`` past either is
``CONGESTED``; the master then replies without this worker's ack, its pushes are refused
here as ``STALE_LOCATION`` and the writers revive elsewhere.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from croupier.core.dataplane import Reserve
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Congested, StaleLocation, Unavailable
from croupier.dataplane.identity import Identity
from croupier.storage.limiter import RESERVATION_BYTES, MemoryLimiter

__all__ = ["MAX_RESERVATIONS", "Reservations"]

MAX_RESERVATIONS = 100_000  # entries, RESERVATION_BYTES each

Pair = tuple[str, str | None]
ShuffleKey = tuple[str, int]


@dataclass(slots=True)
class _Placed:
    """What this worker holds of one shuffle."""

    num_partitions: int
    replicate: bool
    seq: int
    n_pairs: int = 0  # len(pairs): partition p at epoch 0 is on pairs[p % n_pairs]
    mine: dict[int, Pair] = field(default_factory=dict)  # index in pairs -> pair, for pairs naming me
    revived: dict[tuple[int, int], Pair] = field(default_factory=dict)  # (partition, epoch) -> pair
    peers: dict[str, str] = field(default_factory=dict)  # replica -> its registered replicate URL

    def pair(self, partition: int, epoch: int) -> Pair | None:
        if epoch == 0:
            return self.mine.get(partition % self.n_pairs) if self.n_pairs else None
        return self.revived.get((partition, epoch))


class Reservations:
    """Parameters:
    identity: this worker; a ``RESERVE`` for another incarnation is refused.
    cap: the most entries held (a shuffle and each revived location count one).
    limiter: charged ``RESERVATION_BYTES`` per entry (None: a budget of its own, unbounded).
    """

    def __init__(
        self, identity: Identity, *, cap: int = MAX_RESERVATIONS, limiter: MemoryLimiter | None = None
    ) -> None:
        self._identity = identity
        self._cap = cap
        self._limiter = limiter if limiter is not None else MemoryLimiter(1 << 62)
        self._lock = threading.Lock()
        self._shuffles: dict[ShuffleKey, _Placed] = {}
        self._entries = 0
        self._seq = 0

    def reserve(self, r: Reserve) -> int:
        """Record the locations of ``r`` that name this worker; returns the shuffles held.

        Raises:
            StaleLocation: ``r`` was placed on another incarnation of this worker.
            BadRequest: the shuffle is held here with another size or replication.
            Congested: holding it would pass the cap, or the held share of the memory budget.
        """
        self._identity.check(r.incarnation)
        me = self._identity.worker_id
        mine = {i: pair for i, pair in enumerate(r.pairs) if me in pair}
        revived = {
            (p, e): (primary, replica) for p, e, primary, replica in r.revived if me in (primary, replica)
        }
        with self._lock:
            key = (r.app_id, r.shuffle_id)
            placed = self._shuffles.get(key)
            if placed is not None and (placed.num_partitions, placed.replicate) != (
                r.num_partitions,
                r.replicate,
            ):
                raise BadRequest(
                    f"shuffle {key[0]}/{key[1]} is reserved here with another size or replication"
                )
            new = (placed is None) + len(revived.keys() - (placed.revived.keys() if placed else set()))
            if self._entries + new > self._cap:
                raise Congested(
                    f"worker {me} holds {self._entries} reservations, the most it keeps is {self._cap}"
                )
            self._charge(new + (len(mine) - (len(placed.mine) if placed else 0) if r.pairs else 0))
            if placed is None:
                placed = self._shuffles[key] = _Placed(r.num_partitions, r.replicate, 0)
            self._seq += 1
            placed.seq = self._seq
            if r.pairs:
                placed.n_pairs, placed.mine = len(r.pairs), mine
            placed.revived.update(revived)
            placed.peers.update(r.peers)
            self._entries += new
            return len(self._shuffles)

    def _charge(self, entries: int) -> None:
        """Hold ``entries`` more reservations' bytes (fewer: give them back).

        Raises:
            Congested: they would pass the held share of the memory budget.
        """
        if entries < 0:
            self._limiter.release(0, held=-entries * RESERVATION_BYTES)
        elif entries and not self._limiter.try_hold(entries * RESERVATION_BYTES):
            raise Congested(
                f"worker {self._identity.worker_id} holds {self._limiter.held} bytes of location and"
                f" reservation state, the most it keeps is {self._limiter.held_cap}"
            )

    def check_push(
        self,
        app_id: str,
        shuffle_id: int,
        batches: Iterable[tuple[int, int]],
        replica: str | None,
        replica_url: str | None = None,
    ) -> None:
        """Refuse a PUSH unless every batch's location is placed here as primary, with ``replica``
        at the replicate URL the master gave for it (when its ``RESERVE`` named one and a URL is given).

        Raises:
            StaleLocation: a location is not held here as primary at that epoch.
            BadRequest: a partition out of range, or ``replica`` is not the location's placed peer.
            Unavailable: ``replica_url`` is not where the master said that peer is (it moved,
                or a client names another address): handled like a failed replica, with
                ``details.failed_worker``, so that the writer revives; nothing is forwarded.
        """
        with self._lock:
            placed = self._placed(app_id, shuffle_id)
            pinned = placed.peers.get(replica) if replica is not None else None
            if pinned is not None and replica_url is not None and pinned != replica_url:
                raise Unavailable(
                    f"the replica {replica} of {app_id}/{shuffle_id} is at {pinned}, the push names"
                    f" {replica_url}: a worker forwards only to where the master placed its peer",
                    {"failed_worker": replica},
                )
            for partition, epoch in set(batches):
                pair = self._pair(placed, app_id, shuffle_id, partition, epoch, CopyRole.PRIMARY)
                if replica != pair[1]:
                    raise BadRequest(
                        f"{_where(app_id, shuffle_id, partition, epoch)} is replicated to"
                        f" {pair[1] or 'no worker'}, the push names {replica or 'no replica'}"
                    )

    def check_replicate(self, app_id: str, shuffle_id: int, batches: Iterable[tuple[int, int]]) -> None:
        """Refuse a REPLICATE unless every batch's location is placed here as replica.

        Raises:
            StaleLocation: a location is not held here as replica at that epoch.
            BadRequest: a partition out of range.
        """
        with self._lock:
            placed = self._placed(app_id, shuffle_id)
            for partition, epoch in set(batches):
                self._pair(placed, app_id, shuffle_id, partition, epoch, CopyRole.REPLICA)

    def _placed(self, app_id: str, shuffle_id: int) -> _Placed:
        placed = self._shuffles.get((app_id, shuffle_id))
        if placed is None:
            raise StaleLocation(
                f"worker {self._identity.worker_id} holds no location of shuffle {app_id}/{shuffle_id}:"
                " the master did not place it here (or this worker restarted since)"
            )
        return placed

    def _pair(
        self, placed: _Placed, app_id: str, shuffle_id: int, partition: int, epoch: int, role: str
    ) -> Pair:
        if partition >= placed.num_partitions:
            raise BadRequest(f"partition {partition} is out of range 0..{placed.num_partitions - 1}")
        pair = placed.pair(partition, epoch)
        holder = None if pair is None else pair[0] if role == CopyRole.PRIMARY else pair[1]
        if pair is None or holder != self._identity.worker_id:
            raise StaleLocation(
                f"worker {self._identity.worker_id} does not hold"
                f" {_where(app_id, shuffle_id, partition, epoch)} as {role}"
            )
        return pair

    def forget(self, app_id: str, shuffle_id: int | None) -> None:
        """Drop the reservations of a shuffle (or of every shuffle of an app)."""
        with self._lock:
            for key in [k for k in self._shuffles if k[0] == app_id and shuffle_id in (None, k[1])]:
                self._drop(key)

    def forget_unless_since(self, key: ShuffleKey, seq: int) -> bool:
        """Drop ``key``'s reservations unless a ``RESERVE`` for it came after ``seq``; whether
        it may go (a shuffle reserved again since the master's answer is kept)."""
        with self._lock:
            placed = self._shuffles.get(key)
            if placed is not None and placed.seq > seq:
                return False
            if placed is not None:
                self._drop(key)
            return True

    def _drop(self, key: ShuffleKey) -> None:
        # lock held
        placed = self._shuffles.pop(key)
        self._entries -= 1 + len(placed.revived)
        self._limiter.release(0, held=(1 + len(placed.revived) + len(placed.mine)) * RESERVATION_BYTES)

    @property
    def seq(self) -> int:
        """The number of the last ``RESERVE`` taken."""
        with self._lock:
            return self._seq

    def keys(self) -> set[ShuffleKey]:
        """The (app, shuffle) held."""
        with self._lock:
            return set(self._shuffles)


def _where(app_id: str, shuffle_id: int, partition: int, epoch: int) -> str:
    return f"{app_id}/{shuffle_id} partition {partition} epoch {epoch}"
