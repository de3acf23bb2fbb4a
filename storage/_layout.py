"""Where a ``DiskPartitionStore`` keeps its files, and which of its dirs hold no stale ones.

``<dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>`` + ``.data`` (and, of older
versions, ``.index`` or ``.index.tmp``); the shuffle dir's ``index.log`` is
:mod:`croupier.storage.index_log`'s. Here: the names, a walk over them, and
:class:`CleanDirs`, the location dirs known to hold no file of an earlier life (issue 25:
the probes for such files cost a location's ``create`` three ``unlink`` s and a ``stat``
per dir, most of its time at 6,400 partitions).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

from croupier.core import ids
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Unavailable
from croupier.storage.store import LocationKey

__all__ = [
    "DATA_SUFFIX",
    "INDEX_SUFFIX",
    "INT_RE",
    "TMP_SUFFIX",
    "CleanDirs",
    "listdir",
    "os_error",
    "shuffle_dirs",
    "walk",
]

DATA_SUFFIX = ".data"
INDEX_SUFFIX = ".index"
TMP_SUFFIX = ".index.tmp"
_FILE_RE = re.compile(
    r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)-(" + "|".join(CopyRole) + r")(\.data|\.index|\.index\.tmp)"
)
INT_RE = re.compile(r"0|[1-9][0-9]*")


def os_error(action: str, path: Path | str, exc: OSError) -> Unavailable:
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return Unavailable(f"cannot {action} {path}: [{code}] {exc.strerror or exc}")


class CleanDirs:
    """The location dirs ``(disk, app_id, shuffle_id)`` that hold no file of an earlier life:
    made by this store, or found missing, since it opened or since ``forget`` (the shuffle's
    removal). Files appear in them only through the store, which knows each of them (open or
    committed), so a location there needs no probe for leftovers. Not thread-safe: the
    store's lock is held.
    """

    def __init__(self, dirs: tuple[Path, ...]) -> None:
        self._roots = [str(d) for d in dirs]
        self._known: set[tuple[int, str, int]] = set()

    def clean(self, disk: int, key: LocationKey) -> bool:
        """Whether ``key``'s dir on ``disk`` holds no leftover (a missing dir becomes known)."""
        where = (disk, key.app_id, key.shuffle_id)
        if where in self._known:
            return True
        if not os.path.isdir(os.path.join(self._roots[disk], key.app_id, str(key.shuffle_id))):
            self._known.add(where)  # whatever appears there from now on, the store put there
            return True
        return False

    def made(self, disk: int, key: LocationKey) -> None:
        """The store has just created ``key``'s dir on ``disk``."""
        self._known.add((disk, key.app_id, key.shuffle_id))

    def forget(self, app_id: str, shuffle_id: int | None) -> None:
        """The app's dirs (or one shuffle's) were removed: what is known of them is void."""
        self._known = {k for k in self._known if not (k[1] == app_id and shuffle_id in (None, k[2]))}


def shuffle_dirs(root: Path, app_id: str | None = None, shuffle_id: int | None = None) -> Iterator[Path]:
    """Every well-named shuffle dir under ``root`` (or under one app, or that one shuffle's)."""
    apps = [app_id] if app_id is not None else listdir(root)
    for app in apps:
        try:
            ids.app_id(app)
        except BadRequest:
            continue
        shuffles = [str(shuffle_id)] if shuffle_id is not None else listdir(root / app)
        for shuffle in shuffles:
            if INT_RE.fullmatch(shuffle):
                yield root / app / shuffle


def walk(
    root: Path, app_id: str | None = None, shuffle_id: int | None = None
) -> Iterator[tuple[LocationKey, Path]]:
    """Every well-named partition file under ``root`` (or under one app or shuffle), with its key.

    Names that are not ours are ignored; ``.index.tmp`` files are yielded too.
    """
    for directory in shuffle_dirs(root, app_id, shuffle_id):
        for name in listdir(directory):
            m = _FILE_RE.fullmatch(name)
            if m is None:
                continue
            key = LocationKey(directory.parent.name, int(directory.name), int(m[1]), int(m[2]), m[3])
            try:
                key.validate()
            except BadRequest:  # a number beyond 2**31-1
                continue
            yield key, directory / name


def listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise os_error("list", path, exc) from exc
