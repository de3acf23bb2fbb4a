"""``MemoryTier``: small committed locations kept in memory and served from there (issue 15).

At commit, a location copy whose ``.data`` file is at most ``max_location`` bytes is read
back once (the file was just written: it is in the page cache) and kept, as long as the
tier holds at most ``capacity`` bytes (``--memory-tier-fraction`` of ``--memory``). Its
bytes are counted against the worker's memory cap as held state (``MemoryLimiter.try_hold``),
so a full worker keeps no more. The file stays on disk: the tier is only a faster copy of
it, and a location it does not hold is read from disk as before.

Eviction: ``evict(app_id, shuffle_id)`` when DESTROY or the orphan sweep removes the
shuffle (or the whole app, ``shuffle_id`` None). Nothing else evicts: a tier that is full
takes no more until a shuffle goes.

State: the kept bytes per location, their total, and ``hits`` (reads served from memory).
Thread-safe.
"""

from __future__ import annotations

import threading

from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import LocationKey

__all__ = ["MemoryTier"]


class MemoryTier:
    """Parameters:
    max_location: the largest location file kept, bytes (0: none).
    capacity: the most bytes kept in all (0: the tier is off).
    limiter: the worker's memory budget; every byte kept is held there until evicted.
    """

    def __init__(self, max_location: int, capacity: int, limiter: MemoryLimiter | None = None) -> None:
        self.max_location = max(0, max_location)
        self.capacity = max(0, capacity)
        self._limiter = limiter
        self._data: dict[LocationKey, bytes] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    @property
    def enabled(self) -> bool:
        return self.max_location > 0 and self.capacity > 0

    @property
    def used(self) -> int:
        """Bytes kept now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def wants(self, size: int) -> bool:
        """Whether a location of ``size`` bytes could be kept now (before reading it)."""
        return self.enabled and 0 < size <= self.max_location and self._bytes + size <= self.capacity

    def admit(self, key: LocationKey, data: bytes) -> bool:
        """Keep ``data`` as ``key``'s bytes if it fits the tier and the memory cap."""
        size = len(data)
        with self._lock:
            if key in self._data:
                return True
            if not self.wants(size):
                return False
            limiter = self._limiter
            # checked first so that a full cap is not counted as a congested push
            if limiter is not None and (limiter.held + size > limiter.held_cap or not limiter.try_hold(size)):
                return False
            self._data[key] = data
            self._bytes += size
        return True

    def get(self, key: LocationKey) -> bytes | None:
        """The whole file of ``key`` if kept (counted in ``hits``), else None."""
        data = self._data.get(key)
        if data is not None:
            with self._lock:
                self.hits += 1
        return data

    def read(self, key: LocationKey, offset: int, length: int) -> bytes | memoryview | None:
        """``length`` bytes at ``offset`` of ``key``'s file if kept and in range, else None:
        the kept bytes themselves, or a view of them (no copy)."""
        data = self.get(key)
        if data is None or offset < 0 or length < 0 or offset + length > len(data):
            return None
        if offset == 0 and length == len(data):
            return data
        return memoryview(data)[offset : offset + length]

    def evict(self, app_id: str, shuffle_id: int | None = None) -> int:
        """Drop the locations of one shuffle (or of the whole app); how many were kept."""
        with self._lock:
            gone = [
                k
                for k in self._data
                if k.app_id == app_id and (shuffle_id is None or k.shuffle_id == shuffle_id)
            ]
            freed = sum(len(self._data.pop(k)) for k in gone)
            self._bytes -= freed
        if freed and self._limiter is not None:
            self._limiter.release(0, held=freed)
        return len(gone)

    def clear(self) -> None:
        """Drop everything (the worker stops)."""
        with self._lock:
            freed, self._bytes = self._bytes, 0
            self._data.clear()
        if freed and self._limiter is not None:
            self._limiter.release(0, held=freed)
