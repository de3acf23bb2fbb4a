"""``Locations``: the worker's live locations and the ``PartitionActor`` owning each.

State (behind one lock, shared by the push, replicate, control and fetch server threads):
    owners       location -> its actor, from its first push until its shuffle is destroyed
    shards       the fixed actors that own locations by key hash (none: one actor per location)
    committing   shuffles whose commit started here; they admit no more data

Delivery and removal take the same lock, so an ``Append`` told before a ``Drop`` reaches
its actor before that ``Drop`` does, and nothing is delivered to a removed location.

Every live location holds ``LOCATION_BYTES`` of the worker's ``MemoryLimiter`` (held
state), taken with the push that creates it and given back when it is removed (DESTROY,
orphan sweep): a push whose new locations would pass the held share is refused whole,
and creates none.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pykka

from croupier.actors.partition_actor import (
    Append,
    Batches,
    Drop,
    LostPairs,
    PartitionActor,
    SyncJoin,
    shard_of,
)
from croupier.core.errors import Congested, StaleLocation
from croupier.storage.limiter import LOCATION_BYTES, MemoryLimiter
from croupier.storage.store import LocationKey

__all__ = ["Locations", "Owner"]

Owner = pykka.ActorRef[PartitionActor]


class Locations:
    """Which actor owns each location. With ``shards`` > 0 (see ``open``) a fixed set of
    actors owns the locations by key hash; with 0 every location gets an actor of its own,
    started on first use.

    Parameters:
        limiter: the worker's memory budget: ``admit_all`` takes a push's bytes from it, and
            ``LOCATION_BYTES`` per live location.
    """

    def __init__(self, limiter: MemoryLimiter) -> None:
        self._limiter = limiter
        self._lock = threading.Lock()
        self._start: Callable[[], Owner] | None = None
        self._shards: list[Owner] = []
        self._owners: dict[LocationKey, Owner] = {}
        self._committing: set[tuple[str, int]] = set()
        # (partition, epoch) locations a rerun placed here after the shuffle committed
        self._reopened: dict[tuple[str, int], set[tuple[int, int]]] = {}

    def open(self, shards: int, start: Callable[[], Owner]) -> None:
        """Start ``shards`` actors now (0: one per location, started by ``admit``)."""
        with self._lock:
            self._start = start
            for _ in range(shards):
                self._shards.append(start())

    def get(self, key: LocationKey) -> Owner | None:
        """The owner of ``key`` if it is a live location here."""
        with self._lock:
            return self._owners.get(key)

    def admit(self, key: LocationKey) -> Owner:
        """The owner of ``key``, made a live location if it is not one yet (charged).

        Raises:
            StaleLocation: the location's shuffle started committing here.
            Congested: the location would pass the held share of the memory budget.
        """
        if not self.admit_all([key], 0):
            raise Congested(f"no room for the state of {key.name}")
        with self._lock:
            return self._owners[key]

    def admit_all(
        self, keys: Iterable[LocationKey], nbytes: int, *, held: int = 0, replicate: bool = False
    ) -> bool:
        """Make ``keys`` live locations and take ``nbytes`` of buffered data, ``held`` bytes of
        held state and ``LOCATION_BYTES`` per new location from the limiter, or nothing:
        whether it did (False: the worker is congested, no location was made).

        Raises:
            StaleLocation: a location's shuffle started committing here.
        """
        with self._lock:
            new = []
            for key in keys:
                if key not in self._owners:
                    new.append(key)
                if self._sealed(key):
                    raise StaleLocation(
                        f"shuffle {key.app_id}/{key.shuffle_id} is committed here;"
                        f" {key.name} takes no more data"
                    )
            if not self._limiter.try_acquire(
                nbytes, replicate=replicate, held=held + len(new) * LOCATION_BYTES, grow=bool(new)
            ):
                return False
            for key in new:
                self._owners[key] = self._owner_for(key)
            return True

    def _sealed(self, key: LocationKey) -> bool:
        # lock held
        shuffle = (key.app_id, key.shuffle_id)
        if not self._committing or shuffle not in self._committing:
            return False
        return (key.partition, key.epoch) not in self._reopened.get(shuffle, ())

    def reopen(self, app_id: str, shuffle_id: int, where: Iterable[tuple[int, int]]) -> None:
        """Admit these ``(partition, epoch)`` locations even though the shuffle committed here:
        a rerun placed them (``RESERVE`` of revived locations); the next commit covers them.
        A shuffle not committed here needs nothing (a revive before the commit)."""
        with self._lock:
            if (app_id, shuffle_id) in self._committing:
                self._reopened.setdefault((app_id, shuffle_id), set()).update(where)

    def _owner_for(self, key: LocationKey) -> Owner:
        # lock held
        if self._shards:
            return self._shards[shard_of(key, len(self._shards))]
        assert self._start is not None, "the worker is not started"
        return self._start()

    def deliver(
        self,
        groups: list[tuple[LocationKey, Batches, int]],
        *,
        synced: Callable[[LostPairs], None] | None = None,
    ) -> list[LocationKey]:
        """Tell each owner its locations' batches, in one ``Append``; returns the locations
        destroyed since they were admitted (nobody will read them: their bytes go back).
        ``synced``: called with the lost ``(map, partition)`` pairs once the delivered
        locations are flushed (``PartitionActor``)."""
        unwanted: list[LocationKey] = []
        with self._lock:  # ordered against the Drop of ``remove``
            owners: dict[Owner, list[tuple[LocationKey, Batches, int]]] = {}
            for group in groups:
                owner = self._owners.get(group[0])
                if owner is None:
                    unwanted.append(group[0])
                else:
                    owners.setdefault(owner, []).append(group)
            join = None if synced is None else SyncJoin(sum(len(m) for m in owners.values()), synced)
            for owner, mine in owners.items():
                owner.tell(Append(mine, join))
        return unwanted

    def of_shuffle(self, app_id: str, shuffle_id: int, *, seal: bool) -> dict[Owner, list[LocationKey]]:
        """The shuffle's locations by owner; with ``seal``, no new location of it is admitted."""
        with self._lock:
            if seal:
                self._committing.add((app_id, shuffle_id))
            keys = [k for k in self._owners if k.app_id == app_id and k.shuffle_id == shuffle_id]
            return self._by_owner(keys)

    def remove(self, app_id: str, shuffle_id: int | None) -> list[pykka.Future[Any]]:
        """Drop the locations of a shuffle (or of every shuffle of an app); the futures are done
        when their owners have forgotten them (after every ``Append`` delivered before)."""
        done: list[pykka.Future[Any]] = []
        with self._lock:
            keys = [k for k in self._owners if k.app_id == app_id and shuffle_id in (None, k.shuffle_id)]
            self._committing = {
                s for s in self._committing if not (s[0] == app_id and shuffle_id in (None, s[1]))
            }
            for s in [s for s in self._reopened if s[0] == app_id and shuffle_id in (None, s[1])]:
                del self._reopened[s]
            for owner, mine in self._by_owner(keys).items():
                with contextlib.suppress(pykka.ActorDeadError):
                    done.append(owner.ask(Drop(mine), block=False))
                    if not self._shards:
                        owner.stop(block=False)
            for k in keys:
                del self._owners[k]
            self._limiter.release(0, held=len(keys) * LOCATION_BYTES)
        return done

    def _by_owner(self, keys: list[LocationKey]) -> dict[Owner, list[LocationKey]]:
        owners: dict[Owner, list[LocationKey]] = {}
        for k in keys:
            owners.setdefault(self._owners[k], []).append(k)
        return owners

    def shuffles(self) -> set[tuple[str, int]]:
        """The (app, shuffle) of every live location."""
        with self._lock:
            return {(k.app_id, k.shuffle_id) for k in self._owners}

    def all(self) -> list[Owner]:
        """Every actor, forgetting every location (at stop)."""
        with self._lock:
            refs = list({id(r): r for r in [*self._shards, *self._owners.values()]}.values())
            self._limiter.release(0, held=len(self._owners) * LOCATION_BYTES)
            self._owners.clear()
            self._shards = []
            self._start = None
            return refs

    def __len__(self) -> int:
        return len(self._owners)
