"""The dirs of a ``DiskPartitionStore``: their free space and health, and where a location goes.


Each dir has a **reserve** (``reserve`` bytes, default the smaller of 5 GiB and 10 % of
its filesystem) and a health: a dir whose write fails with anything but ``ENOSPC``/``EDQUOT``
is marked failed for the life of the store. A dir is *usable* when it is healthy and its
free bytes (``statvfs``) are at least its reserve. ``create`` puts a location on its hashed
dir if that one is usable, else on the usable dir with the most free space, else on the
healthy dir with the most free space; with no healthy dir it raises ``Unavailable``.
Data writes never take a dir below half its reserve (that *headroom* is left to the index
files that commits write): such a write fails as ``ENOSPC`` would.
A write (or commit) that fails is undone and retried on another healthy dir of the store:
the bytes already written are copied there, then the call is written again, and the old
file is deleted. Only when no healthy dir takes it does the call raise (``Unavailable``,
``details.no_space`` true when the failures were ``ENOSPC``). ``dir_states`` reports each
dir's free bytes, reserve and health for heartbeats.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from croupier.storage.store import DirState, LocationKey, disk_for

__all__ = ["NO_SPACE", "DirHealth", "default_reserve"]

log = logging.getLogger("croupier.storage.disk")

RESERVE_MAX = 5 * 1024**3  # the default reserve: the smaller of this and RESERVE_SHARE of the disk
RESERVE_SHARE = 0.10
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# A data write checks its dir's free space against the commit headroom. It asks the
# filesystem (statvfs) again only when its last answer is older than ROOM_TTL seconds, or
# when the free bytes it then reported, less what this store wrote since, come within
# ROOM_SLACK bytes of the headroom: near the limit every write asks.
ROOM_TTL = 0.25
ROOM_SLACK = 64 * 1024**2


def default_reserve(total: int) -> int:
    """The default reserve of a filesystem of ``total`` bytes: min(5 GiB, 10 % of it)."""
    return min(RESERVE_MAX, int(total * RESERVE_SHARE))


def _headroom(reserve: int) -> int:
    """Free bytes data writes leave to commits (index files): half the reserve."""
    return reserve // 2


class DirHealth:
    """The free space and health of a store's dirs (thread-safe).

    Parameters:
        dirs: the store's dirs; disk ``i`` is ``dirs[i]``.
        reserve: free bytes each dir keeps (None: ``default_reserve`` of its filesystem).

    State:
        _failed: per dir, why it is unhealthy (None: healthy), behind ``_dir_lock``.
        _room: per dir, (free bytes left after the writes since, headroom, monotonic time of
            the statvfs), behind ``_room_lock``.
        Both locks are taken alone (from a file's lock or the store's).
    """

    def __init__(self, dirs: Sequence[Path], reserve: int | None) -> None:
        self._dirs = tuple(dirs)
        self.reserve = reserve
        self._failed: list[str | None] = [None] * len(self._dirs)
        self._dir_lock = threading.Lock()
        self._room: list[tuple[int, int, float] | None] = [None] * len(self._dirs)
        self._room_lock = threading.Lock()

    def states(self) -> list[DirState]:
        """Each dir's free and total bytes, reserve and health (``statvfs`` now)."""
        out = []
        for i, d in enumerate(self._dirs):
            try:
                st = os.statvfs(d)
                free, total, ok = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, True
            except OSError:
                free, total, ok = 0, 0, False
            reserve = self.reserve if self.reserve is not None else default_reserve(total)
            with self._dir_lock:
                healthy = ok and self._failed[i] is None
            out.append(DirState(str(d), free, total, reserve, healthy))
        return out

    def choose(
        self, key: LocationKey, exclude: set[int], need: int = 0, *, strict: bool = False
    ) -> int | None:
        """The dir for (more of) ``key``: its hashed dir if usable with ``need`` more bytes, else
        the usable one with the most free space, else the healthy one with the most; None: none.
        ``strict``: only dirs where ``need`` bytes leave the commit headroom free."""
        states = self.states()
        healthy = [
            i
            for i, st in enumerate(states)
            if st.healthy and i not in exclude and (not strict or st.free - need >= _headroom(st.reserve))
        ]
        if not healthy:
            return None
        roomy = [i for i in healthy if states[i].free - need >= states[i].reserve]
        first = disk_for(key, len(self._dirs))
        if first in roomy:
            return first
        return max(roomy or healthy, key=lambda i: (states[i].free, -i))

    def check_room(self, disk: int, nbytes: int) -> None:
        """Raises ENOSPC when writing ``nbytes`` to ``disk`` would cut into the headroom kept for
        commits (half the reserve: the index files of the locations there).

        The filesystem is asked again only when its last answer is stale or the estimate is
        close to the headroom (``ROOM_TTL``, ``ROOM_SLACK``); a write that fills the disk anyway
        fails with ENOSPC itself, which the caller handles the same way."""
        now = time.monotonic()
        with self._room_lock:
            room = self._room[disk]
            if room is not None and now - room[2] < ROOM_TTL:
                free, headroom, at = room
                if free - nbytes - headroom > ROOM_SLACK:
                    self._room[disk] = (free - nbytes, headroom, at)
                    return
        try:
            st = os.statvfs(self._dirs[disk])
        except OSError:
            return  # the write itself will tell
        free = st.f_bavail * st.f_frsize
        reserve = self.reserve if self.reserve is not None else default_reserve(st.f_blocks * st.f_frsize)
        headroom = _headroom(reserve)
        if free - nbytes < headroom:
            raise OSError(errno.ENOSPC, f"{nbytes} bytes would leave less than the commit headroom free")
        with self._room_lock:
            self._room[disk] = (free - nbytes, headroom, now)

    def write_failed(self, disk: int, exc: OSError) -> None:
        """A write to ``disk`` failed: anything but "no space" marks the dir unhealthy for good."""
        if exc.errno in NO_SPACE:
            log.warning("%s is full: %s", self._dirs[disk], exc)
            return
        with self._dir_lock:
            if self._failed[disk] is None:
                self._failed[disk] = str(exc)
                log.error("%s is marked unhealthy: a write failed: %s", self._dirs[disk], exc)
