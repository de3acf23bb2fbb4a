"""Emptied ``.data`` files kept for the next locations of a store: a removed shuffle's files
are truncated and moved to ``<dir>/+free/<n>``, and a new location's file is one of those,
moved into place, when there is one.

Creating a file was the largest per-location cost left at many partitions (issue 25): on
this project's ext4 a create takes 250 to 600 µs of CPU (the inode allocator skips the inodes
freed recently), against 19 µs for a rename and 11 µs for a truncate. A worker that runs
shuffle after shuffle therefore reuses the inodes of the last ones instead of freeing and
allocating them again.

``+`` is not allowed in an app id (``croupier.core.ids``), so no app dir is ever named
``+free``, and the store's walks over app dirs skip it. A pooled file holds no data (it is
truncated when it goes in, and again when it comes out, so a crash between the two steps
leaves nothing readable); at most ``limit`` files wait per dir, the rest are unlinked.

Not thread-safe: the store calls it with its lock held.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

__all__ = ["POOL_DIR", "POOL_FILES", "FilePool"]

POOL_DIR = "+free"
POOL_FILES = 16_384  # per dir: the files of ~2 shuffles of 6,400 partitions on 3 workers

log = logging.getLogger(__name__)


class FilePool:
    """Per dir of a store, the emptied files waiting in its ``+free`` dir.

    State:
        _dirs: each store dir's pool dir (made at the first ``put`` there).
        _free: per dir, the names waiting (found there at start, then put), taken last first.
        _next: per dir, the next name ``put`` gives.
    """

    def __init__(self, dirs: tuple[Path, ...], limit: int = POOL_FILES) -> None:
        self.limit = limit
        self._dirs = [d / POOL_DIR for d in dirs]
        self._free: list[list[str]] = []
        for d in self._dirs:
            try:
                names = [n for n in os.listdir(d) if n.isdigit()]
            except OSError:  # none yet (or unreadable: then nothing is taken from it)
                names = []
            self._free.append(sorted(names, key=int))
        self._next = [int(names[-1]) + 1 if names else 0 for names in self._free]

    def __len__(self) -> int:
        return sum(len(names) for names in self._free)

    def take(self, disk: int, target: Path) -> bool:
        """Move a pooled file of ``disk`` to ``target`` (which must not exist), empty. False,
        with nothing moved, when none waits there or the move fails (the caller's first open
        then creates the file)."""
        names = self._free[disk]
        while names:
            source = self._dirs[disk] / names.pop()
            try:
                os.rename(source, target)
            except OSError as exc:  # gone (removed by hand) or the dir failed: try the next
                log.debug("cannot take %s from the file pool: %s", source, exc)
                continue
            try:
                os.truncate(target, 0)  # a crash may have left it before its truncate
            except OSError:
                with contextlib.suppress(OSError):
                    target.unlink()
                return False
            return True
        return False

    def put(self, disk: int, path: Path) -> bool:
        """Empty the file ``path`` of ``disk`` and move it to the pool. False, with the file left
        where it was, when the pool of that dir is full or a step fails (the caller removes it)."""
        if len(self._free[disk]) >= self.limit:
            return False
        pool = self._dirs[disk]
        name = str(self._next[disk])
        try:
            os.truncate(path, 0)
            try:
                os.rename(path, pool / name)
            except FileNotFoundError:
                pool.mkdir(exist_ok=True)
                os.rename(path, pool / name)
        except OSError as exc:
            log.debug("cannot put %s in the file pool: %s", path, exc)
            return False
        self._next[disk] += 1
        self._free[disk].append(name)
        return True
