"""``DiskPartitionStore``: a worker's partition files on its local disks.

Layout (DESIGN §10)
-------------------

One directory per disk, given to the store in order (disk ``i`` is ``dirs[i]``)::

    <dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.data        the batches, back to back
    <dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.index       written at commit
    <dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.index.tmp   an index being written

``app_id`` is validated by ``croupier.core.ids.app_id`` and the numbers are
non-negative decimal integers without leading zeros; ``role`` is ``primary``
or ``replica``. Every id is validated before it is used in a path.

A new location goes to disk ``crc32("<app_id>/<shuffle_id>/<partition>-<epoch>-<role>") %
len(dirs)`` (:func:`croupier.storage.store.disk_for`): stable across restarts
and spread evenly. Lookups still search every dir, so adding a dir to a worker
does not hide its older files.

Index file
----------

UTF-8 JSON, one object with sorted keys and no whitespace, then ``\\n``::

    {"crc":<u32>,
     "index":{"batches":<int>,"chunks":[[offset,length],...],"seals":[[map_id,attempt_id,count],...],
              "size":<int>},
     "key":{"app_id":<str>,"epoch":<int>,"partition":<int>,"role":"primary"|"replica","shuffle_id":<int>},
     "version":1}

- ``crc`` is ``zlib.crc32`` of the canonical JSON (``sort_keys=True``,
  ``separators=(",", ":")``, ASCII) of the object *without* ``crc``, UTF-8 encoded.
- ``key`` must equal the key that the file's path names.
- ``index.chunks`` are ``(offset, length)`` pairs in file order, cut at batch
  boundaries, tiling ``[0, size)``; ``index.batches`` counts data batches;
  ``index.seals`` holds each distinct seal's ``(map_id, attempt_id, batch_id)``, sorted.
- ``index.size`` must equal the size of the ``.data`` file.

A location is *committed* exactly when its ``.index`` passes all of these
checks. An index that fails one (damaged, from another version, or beside a
missing or wrongly sized ``.data``) is skipped with a warning and the location
counts as not committed; ``create`` for that key then deletes both files.

Commit: close the ``.data``; write ``.index.tmp``, ``os.replace`` it to
``.index``. With ``fsync=True`` (the store's default) the ``.data``, the
``.index.tmp`` and the directory are fsync'ed too, and directories are fsync'ed
into their parents when ``create`` makes them. Without it a commit survives the
process but not an OS crash: a ``.data`` torn by one fails the batch digests
readers check, so it is read from the other copy or reported lost, never
returned wrong.

Descriptors (DESIGN §11)
------------------------

A worker may host thousands of locations, so descriptors are opened late (a
writer at its first ``write``, a reader at its first ``read``) and kept in one
LRU of at most ``max_open_files`` shared by writers and readers. An evicted
writer is reopened with ``O_APPEND`` at its next write; ``commit`` closes it.
A descriptor in use by a syscall is never evicted: if more than
``max_open_files`` are in use at once the bound is exceeded briefly rather than
failing. ``EMFILE``/``ENFILE`` from ``open`` evicts an idle descriptor and
retries, so running out of descriptors never fails a write while any can be
freed. Short-lived descriptors for index files and directory fsyncs at commit
are opened the same way but are not kept.

Free space and health (issue 15)
--------------------------------

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

Uncommitted ``.data`` files left by a crash stay on disk (``scan`` ignores
them) until ``create`` reuses the location or ``remove`` deletes the shuffle.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from croupier.core import ids
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Conflict, NotCommitted, Unavailable, UnknownShuffle
from croupier.storage.store import (
    ChunkIndex,
    CommittedFile,
    DirState,
    LocationKey,
    check_range,
    check_scope,
    disk_for,
)

__all__ = [
    "INDEX_VERSION",
    "DiskPartitionFile",
    "DiskPartitionStore",
    "decode_index",
    "default_reserve",
    "encode_index",
]

log = logging.getLogger(__name__)

INDEX_VERSION = 1
DATA_SUFFIX = ".data"
INDEX_SUFFIX = ".index"
TMP_SUFFIX = ".index.tmp"
_FILE_RE = re.compile(
    r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)-(" + "|".join(CopyRole) + r")(\.data|\.index|\.index\.tmp)"
)
_INT_RE = re.compile(r"0|[1-9][0-9]*")

RESERVE_MAX = 5 * 1024**3  # the default reserve: the smaller of this and RESERVE_SHARE of the disk
RESERVE_SHARE = 0.10
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# A data write checks its dir's free space against the commit headroom. It asks the
# filesystem (statvfs) again only when its last answer is older than ROOM_TTL seconds, or
# when the free bytes it then reported, less what this store wrote since, come within
# ROOM_SLACK bytes of the headroom: near the limit every write asks.
ROOM_TTL = 0.25
ROOM_SLACK = 64 * 1024**2
_COPY_STEP = 1024 * 1024

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def _iov_max() -> int:
    try:
        value = os.sysconf("SC_IOV_MAX")
    except (ValueError, OSError):
        return 1024
    return value if value > 0 else 1024


_IOV_MAX = _iov_max()


def _os_error(action: str, path: Path | str, exc: OSError) -> Unavailable:
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return Unavailable(f"cannot {action} {path}: [{code}] {exc.strerror or exc}")


def default_reserve(total: int) -> int:
    """The default reserve of a filesystem of ``total`` bytes: min(5 GiB, 10 % of it)."""
    return min(RESERVE_MAX, int(total * RESERVE_SHARE))


def _headroom(reserve: int) -> int:
    """Free bytes data writes leave to commits (index files): half the reserve."""
    return reserve // 2


class _SourceError(Exception):
    """Reading the bytes to move failed: the old dir's fault, not the new one's."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _copy_prefix(src: Path, dst: Path, size: int) -> None:
    """Write the first ``size`` bytes of ``src`` to a new ``dst`` (OSError: the writing failed;
    ``_SourceError``: the reading did)."""
    try:
        fin = open(src, "rb")  # noqa: SIM115 - closed below; errors must be told apart
    except FileNotFoundError:
        if size:
            raise _SourceError(OSError(errno.ENOENT, f"{src} is gone")) from None
        fin = None
    try:
        with open(dst, "wb") as fout:
            left = size
            while left:
                try:
                    chunk = fin.read(min(left, _COPY_STEP)) if fin is not None else b""
                except OSError as exc:
                    raise _SourceError(exc) from exc
                if not chunk:
                    raise _SourceError(OSError(errno.EIO, f"{src} ends {left} bytes early"))
                fout.write(chunk)
                left -= len(chunk)
    finally:
        if fin is not None:
            fin.close()


# -- the index file -------------------------------------------------------------------------------


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_index(key: LocationKey, index: ChunkIndex) -> bytes:
    """The bytes of a ``.index`` file (format in the module docstring)."""
    body = {"version": INDEX_VERSION, "key": key.to_json(), "index": index.to_json()}
    return _canonical({**body, "crc": zlib.crc32(_canonical(body))}) + b"\n"


def decode_index(raw: bytes, key: LocationKey) -> ChunkIndex:
    """Parse and check a ``.index`` file that should belong to ``key``.

    Raises:
        ValueError: the file is not a valid version-1 index for ``key`` (the message says why).
    """
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) != {"version", "key", "index", "crc"}:
        raise ValueError("not an index object")
    if doc["version"] != INDEX_VERSION:
        raise ValueError(f"version {doc['version']!r}, expected {INDEX_VERSION}")
    body = {k: v for k, v in doc.items() if k != "crc"}
    if doc["crc"] != zlib.crc32(_canonical(body)):
        raise ValueError("checksum mismatch")
    try:
        found = LocationKey.from_json(doc["key"])
        index = ChunkIndex.from_json(doc["index"])
    except BadRequest as exc:
        raise ValueError(exc.message) from exc
    if found != key:
        raise ValueError(f"it names {found}, its path names {key}")
    return index


# -- bounded descriptors --------------------------------------------------------------------------


class _Handle:
    """A file the LRU may hold a descriptor for.

    State:
        path, flags: how to (re)open it.
        fd: the open descriptor, or ``None``.
        pins: syscalls using ``fd`` now; a pinned handle is never evicted.
        drop: close ``fd`` when the last pin goes instead of keeping it idle.
    """

    __slots__ = ("drop", "fd", "flags", "path", "pins")

    def __init__(self, path: Path, flags: int) -> None:
        self.path = path
        self.flags = flags
        self.fd: int | None = None
        self.pins = 0
        self.drop = False


class _FdCache:
    """At most ``limit`` descriptors, shared by every writer and reader of a store.

    State:
        _idle: open, unpinned handles, least recently used first.
        _count: descriptors open (idle and pinned).
        _closed: set by ``close``; afterwards ``use`` raises Unavailable.
        _lock: guards all of the above and every handle's fields. It is the
            innermost lock: nothing else is taken while it is held.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._idle: OrderedDict[_Handle, None] = OrderedDict()
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    @contextmanager
    def use(self, h: _Handle) -> Iterator[int]:
        """Pin ``h``'s descriptor (opening it if needed) for the ``with`` block.

        Raises:
            OSError: opening failed.
            Unavailable: the store is closed.
        """
        with self._lock:
            if self._closed:
                raise Unavailable("the partition store is closed")
            if h.fd is None:
                h.fd = self._open(str(h.path), h.flags)
            else:
                self._idle.pop(h, None)
            h.pins += 1
            fd = h.fd
        try:
            yield fd
        finally:
            with self._lock:
                h.pins -= 1
                if h.pins == 0:
                    if h.drop or self._closed:
                        self._close(h)
                    else:
                        self._idle[h] = None
                        while self._count > self.limit and self._idle:
                            self._close(self._idle.popitem(last=False)[0])

    def open_raw(self, path: str, flags: int) -> int:
        """Open a short-lived descriptor, making room as for a cached one. The caller closes it
        with :meth:`close_raw`."""
        with self._lock:
            return self._open(path, flags)

    def close_raw(self, fd: int) -> None:
        with self._lock:
            self._count -= 1
        os.close(fd)

    def discard(self, h: _Handle) -> None:
        """Close ``h``'s descriptor now, or when its last user unpins it."""
        with self._lock:
            if h.fd is None:
                return
            if h.pins:
                h.drop = True
            else:
                self._idle.pop(h, None)
                self._close(h)

    def close(self) -> None:
        """Close every idle descriptor; pinned ones close when unpinned."""
        with self._lock:
            self._closed = True
            while self._idle:
                self._close(self._idle.popitem(last=False)[0])

    def _open(self, path: str, flags: int) -> int:
        # lock held
        while self._count >= self.limit and self._idle:
            self._close(self._idle.popitem(last=False)[0])
        while True:
            try:
                fd = os.open(path, flags, 0o644)
            except OSError as exc:
                # Out of descriptors (ours or the system's): free an idle one and retry.
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._idle:
                    self._close(self._idle.popitem(last=False)[0])
                    continue
                raise
            self._count += 1
            return fd

    def _close(self, h: _Handle) -> None:
        # lock held; h is not in _idle
        fd, h.fd, h.drop = h.fd, None, False
        if fd is None:
            return
        self._count -= 1
        try:
            os.close(fd)
        except OSError as exc:  # data is made durable by fsync at commit, which reports write errors
            log.warning("closing %s failed: %s", h.path, exc)


def _byte_views(pieces: Sequence[bytes | memoryview]) -> tuple[list[bytes | memoryview], int]:
    """The non-empty pieces as flat byte buffers (no copies), and their total size."""
    out: list[bytes | memoryview] = []
    total = 0
    for piece in pieces:
        flat = (
            piece.cast("B")
            if isinstance(piece, memoryview) and (piece.ndim != 1 or piece.itemsize != 1)
            else piece
        )
        n = len(flat)
        if n:
            out.append(flat)
            total += n
    return out, total


def _writev_all(fd: int, views: list[bytes | memoryview]) -> None:
    """Write every view with as few ``os.writev`` calls as possible, resuming after short writes."""
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i : i + _IOV_MAX])
        if n <= 0:
            raise OSError(errno.EIO, "writev wrote nothing")
        while n:
            v = views[i]
            if n >= len(v):
                n -= len(v)
                i += 1
            else:
                views[i] = memoryview(v)[n:]  # a view of the rest, not a copy
                n = 0


# -- files and the store --------------------------------------------------------------------------


class DiskPartitionFile:
    """An open location of a :class:`DiskPartitionStore` (see :class:`PartitionFile`).

    State:
        key, disk: the location and the index of the dir holding it.
        data_path, index_path: its two files.
        _size: bytes written (and kept) so far.
        _state: ``open``; ``failed`` (a failed write could not be undone: writes and commit raise
            Unavailable); ``committed``; ``aborted``; ``removed``; ``closed`` (with the store).
        _lock: serialises write/commit/abort against ``remove`` and ``close``.
    """

    def __init__(self, store: DiskPartitionStore, key: LocationKey, disk: int, directory: Path) -> None:
        self.key = key
        self.disk = disk
        self.data_path = directory / (key.name + DATA_SUFFIX)
        self.index_path = directory / (key.name + INDEX_SUFFIX)
        self._store = store
        self._handle = _Handle(self.data_path, _WRITE_FLAGS)
        self._size = 0
        self._state = "open"
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        views, total = _byte_views(pieces)
        with self._lock:
            if self._state != "open":
                raise Unavailable(f"cannot write to {self.data_path}: it is {self._state}")
            if not total:
                return
            tried: set[int] = set()
            no_space = True
            while True:
                try:
                    self._store._check_room(self.disk, total)
                    self._write_here(list(views))  # a copy: a short write replaces its items
                except OSError as exc:
                    error = _os_error("write", self.data_path, exc)
                    no_space = no_space and exc.errno in _NO_SPACE
                    self._store._write_failed(self.disk, exc)
                    tried.add(self.disk)
                    if self._state != "open" or not self._move(tried, total):
                        raise Unavailable(error.message, {"no_space": no_space}) from exc
                    continue
                self._size += total
                return

    def _write_here(self, views: list[bytes | memoryview]) -> None:
        with self._store._fds.use(self._handle) as fd:
            try:
                _writev_all(fd, views)
            except OSError:
                self._undo(fd)
                raise

    def _move(self, tried: set[int], need: int) -> bool:
        """Copy what was written here to another healthy dir and go on there (file lock held).
        False when no dir takes it (or the bytes here cannot be read back)."""
        store = self._store
        while True:
            disk = store._choose(self.key, tried, self._size + need, strict=True)
            if disk is None:
                return False
            tried.add(disk)
            target: Path | None = None
            try:
                directory = store._make_dirs(disk, self.key)
                target = directory / (self.key.name + DATA_SUFFIX)
                _copy_prefix(self.data_path, target, self._size)
            except _SourceError as exc:
                log.error("cannot move %s: reading it failed: %s", self.data_path, exc)
                if target is not None:
                    target.unlink(missing_ok=True)
                return False
            except OSError as exc:
                store._write_failed(disk, exc)
                if target is not None:
                    with contextlib.suppress(OSError):
                        target.unlink(missing_ok=True)
                continue
            store._fds.discard(self._handle)
            for old in (self.data_path, self.index_path):
                with contextlib.suppress(OSError):
                    old.unlink(missing_ok=True)
            log.warning("moved %s (%d bytes) to %s after a failed write", self.data_path, self._size, target)
            self.disk, self.data_path = disk, target
            self.index_path = directory / (self.key.name + INDEX_SUFFIX)
            self._handle = _Handle(target, _WRITE_FLAGS)
            return True

    def _undo(self, fd: int) -> None:
        """Cut a partly written call off again, so that the caller may retry it."""
        try:
            os.ftruncate(fd, self._size)
        except OSError as exc:
            log.warning("cannot truncate %s after a failed write: %s", self.data_path, exc)
            self._state = "failed"

    def commit(self, index: ChunkIndex) -> CommittedFile:
        with self._lock:
            if self._state in ("failed", "closed"):
                raise Unavailable(f"cannot commit {self.data_path}: it is {self._state}")
            if self._state != "open":
                raise Conflict(f"cannot commit {self.data_path}: it is {self._state}")
            if index.size != self._size:
                raise Conflict(f"index says {index.size} bytes, {self.data_path} holds {self._size}")
            tried: set[int] = set()
            while True:
                try:
                    self._commit_here(index)
                    break
                except OSError as exc:
                    error = _os_error("commit", self.data_path, exc)
                    self._store._write_failed(self.disk, exc)
                    tried.add(self.disk)
                    if not self._move(tried, 0):
                        raise error from exc
            self._state = "committed"
        done = CommittedFile(self.key, index)
        self._store._committed_file(self, done)
        return done

    def _commit_here(self, index: ChunkIndex) -> None:
        fds = self._store._fds
        # Opening creates the file if nothing was ever written.
        durable = self._store.fsync
        with fds.use(self._handle) as fd:
            if durable:
                os.fsync(fd)
        fds.discard(self._handle)
        raw = encode_index(self.key, index)
        tmp = self.index_path.parent / (self.key.name + TMP_SUFFIX)
        fd = fds.open_raw(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
        try:
            try:
                _writev_all(fd, [raw])
                if durable:
                    os.fsync(fd)
            finally:
                fds.close_raw(fd)
            os.replace(tmp, self.index_path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        if durable:
            _fsync_dir(fds, self.index_path.parent)

    def abort(self) -> None:
        with self._lock:
            if self._state not in ("open", "failed"):
                return
            self._state = "aborted"
            self._store._fds.discard(self._handle)
            for path in (self.data_path, self.index_path.parent / (self.key.name + TMP_SUFFIX)):
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:  # cleanup: the next remove() of the shuffle tries again
                    log.warning("cannot delete %s: %s", path, exc)
        self._store._forget(self)

    def _kill(self, state: str) -> None:
        """Called by the store's ``remove`` (``removed``) and ``close`` (``closed``)."""
        with self._lock:
            if self._state in ("open", "failed"):
                self._state = state
                self._store._fds.discard(self._handle)


def _fsync_dir(fds: _FdCache, path: Path) -> None:
    fd = fds.open_raw(str(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        fds.close_raw(fd)


class DiskPartitionStore:
    """Partition files in one directory per disk (layout and index format: module docstring).

    Parameters:
        dirs: one directory per disk (created if missing); disk ``i`` is ``dirs[i]``.
        max_open_files: the bound on descriptors kept open for writers and readers.
        reserve: free bytes each dir keeps (None: ``default_reserve`` of its filesystem).

    State:
        _dirs: absolute paths of the dirs.
        _fds: the shared descriptor LRU.
        _open: locations created and not yet committed, aborted or removed.
        _committed: committed locations seen so far (committed here, found by
            ``scan``, or looked up on disk): ``key -> (file, disk)``.
        _readers: descriptor handles of committed files that were read.
        _failed: per dir, why it is unhealthy (None: healthy), behind ``_dir_lock``
            (taken alone, from a file's lock or the store's).
        _lock: guards the dicts and ``_closed``. Lock order: store, then a
            file's lock, then the LRU's; a file never takes the store lock while
            holding its own.

    Raises (constructor):
        ValueError: no dirs, the same dir twice, or ``max_open_files < 1``.
        Unavailable: a dir cannot be created.
    """

    def __init__(
        self,
        dirs: Sequence[str | os.PathLike[str]],
        *,
        max_open_files: int = 512,
        fsync: bool = True,
        reserve: int | None = None,
    ) -> None:
        if reserve is not None and reserve < 0:
            raise ValueError(f"reserve must not be negative, not {reserve}")
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be positive, not {max_open_files}")
        paths = [Path(os.path.abspath(d)) for d in dirs]
        if not paths:
            raise ValueError("a DiskPartitionStore needs at least one directory")
        if len(set(paths)) != len(paths):
            raise ValueError(f"the same directory is listed twice in {[str(p) for p in paths]}")
        for p in paths:
            try:
                p.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise _os_error("create the storage directory", p, exc) from exc
        self._dirs = tuple(paths)
        self.fsync = fsync
        self.reserve = reserve
        self._failed: list[str | None] = [None] * len(paths)
        self._dir_lock = threading.Lock()
        # per dir: (free bytes left after the writes since, headroom, monotonic time of the statvfs)
        self._room: list[tuple[int, int, float] | None] = [None] * len(paths)
        self._room_lock = threading.Lock()
        self._fds = _FdCache(max_open_files)
        self._open: dict[LocationKey, DiskPartitionFile] = {}
        self._committed: dict[LocationKey, tuple[CommittedFile, int]] = {}
        self._readers: dict[LocationKey, _Handle] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def num_disks(self) -> int:
        return len(self._dirs)

    @property
    def dirs(self) -> tuple[Path, ...]:
        return self._dirs

    @property
    def open_files(self) -> int:
        """Descriptors the store holds right now (for tests and metrics)."""
        return self._fds.count

    def dir_states(self) -> list[DirState]:
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

    def _choose(
        self, key: LocationKey, exclude: set[int], need: int = 0, *, strict: bool = False
    ) -> int | None:
        """The dir for (more of) ``key``: its hashed dir if usable with ``need`` more bytes, else
        the usable one with the most free space, else the healthy one with the most; None: none.
        ``strict``: only dirs where ``need`` bytes leave the commit headroom free."""
        states = self.dir_states()
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

    def _check_room(self, disk: int, nbytes: int) -> None:
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

    def _write_failed(self, disk: int, exc: OSError) -> None:
        """A write to ``disk`` failed: anything but "no space" marks the dir unhealthy for good."""
        if exc.errno in _NO_SPACE:
            log.warning("%s is full: %s", self._dirs[disk], exc)
            return
        with self._dir_lock:
            if self._failed[disk] is None:
                self._failed[disk] = str(exc)
                log.error("%s is marked unhealthy: a write failed: %s", self._dirs[disk], exc)

    def location_dir(self, disk: int, key: LocationKey) -> Path:
        """``<dirs[disk]>/<app_id>/<shuffle_id>``. Raises BadRequest for an invalid key."""
        key.validate()
        return self._dirs[disk] / key.app_id / str(key.shuffle_id)

    def create(self, key: LocationKey) -> DiskPartitionFile:
        key.validate()
        with self._lock:
            self._check_open()
            where = f"{key.app_id}/{key.shuffle_id}/{key.name}"
            if key in self._open:
                raise Conflict(f"location {where} is already open")
            if self._lookup(key) is not None:
                raise Conflict(f"location {where} is committed")
            disk = self._choose(key, set())
            if disk is None:
                raise Unavailable(f"cannot create {where}: no healthy directory is left", {"no_space": False})
            try:
                # Files of an earlier life: uncommitted data, a damaged index, an unfinished index.
                for i in range(len(self._dirs)):
                    d = self.location_dir(i, key)
                    for suffix in (DATA_SUFFIX, INDEX_SUFFIX, TMP_SUFFIX):
                        (d / (key.name + suffix)).unlink(missing_ok=True)
                directory = self._make_dirs(disk, key)
            except OSError as exc:
                raise _os_error("create", where, exc) from exc
            f = DiskPartitionFile(self, key, disk, directory)
            self._open[key] = f
            return f

    def committed(self, key: LocationKey) -> CommittedFile | None:
        key.validate()
        with self._lock:
            self._check_open()
            if key in self._open:
                return None
            found = self._lookup(key)
        return found[0] if found else None

    def read(self, key: LocationKey, offset: int, length: int) -> bytes:
        key.validate()
        with self._lock:
            self._check_open()
            where = f"{key.app_id}/{key.shuffle_id}/{key.name}"
            if key in self._open:
                raise NotCommitted(f"location {where} is not committed")
            found = self._lookup(key)
            if found is None:
                raise UnknownShuffle(f"no location {where}")
            done, disk = found
            handle = self._readers.get(key)
            if handle is None:
                path = self.location_dir(disk, key) / (key.name + DATA_SUFFIX)
                handle = self._readers[key] = _Handle(path, _READ_FLAGS)
        check_range(key, offset, length, done.index.size)
        if not length:
            return b""
        try:
            with self._fds.use(handle) as fd:
                data = os.pread(fd, length, offset)
                if len(data) < length:  # rare: a huge read, or the file shrank underneath us
                    parts = [data]
                    got = len(data)
                    while got < length:
                        more = os.pread(fd, length - got, offset + got)
                        if not more:
                            raise Unavailable(
                                f"{handle.path} ends at {offset + got}, its index says {done.index.size}"
                            )
                        parts.append(more)
                        got += len(more)
                    data = b"".join(parts)
        except OSError as exc:
            raise _os_error("read", handle.path, exc) from exc
        return data

    def scan(self, app_id: str | None = None, shuffle_id: int | None = None) -> list[CommittedFile]:
        check_scope(app_id, shuffle_id)
        with self._lock:
            self._check_open()
            found: dict[LocationKey, tuple[CommittedFile, int]] = {}
            for disk, root in enumerate(self._dirs):
                for key, path in _walk(root, app_id, shuffle_id):
                    if path.name.endswith(INDEX_SUFFIX) and key not in self._open:
                        # a file committed or loaded here before is not read again
                        cached = self._committed.get(key)
                        entry = cached if cached is not None and cached[1] == disk else self._load(disk, key)
                        if entry is None:
                            continue
                        if key in found:
                            log.warning("skipping %s: %s is also on disk %d", path, key, found[key][1])
                            continue
                        found[key] = entry
            self._committed.update(found)
            return sorted((entry[0] for entry in found.values()), key=lambda c: c.key)

    def remove(self, app_id: str, shuffle_id: int | None = None) -> int:
        ids.app_id(app_id)
        if shuffle_id is not None:
            ids.int_id("shuffle_id", shuffle_id)

        def hit(key: LocationKey) -> bool:
            return key.app_id == app_id and (shuffle_id is None or key.shuffle_id == shuffle_id)

        with self._lock:
            self._check_open()
            gone: set[LocationKey] = set()
            for key in [k for k in self._open if hit(k)]:
                self._open.pop(key)._kill("removed")
                gone.add(key)
            for key in [k for k in self._committed if hit(k)]:
                del self._committed[key]
                gone.add(key)
            for key in [k for k in self._readers if hit(k)]:
                self._fds.discard(self._readers.pop(key))
            for root in self._dirs:
                app_dir = root / app_id
                target = app_dir if shuffle_id is None else app_dir / str(shuffle_id)
                if not target.is_dir():
                    continue
                gone.update(key for key, _ in _walk(root, app_id, shuffle_id))
                try:
                    shutil.rmtree(target)
                except OSError as exc:
                    raise _os_error("remove", target, exc) from exc
                if shuffle_id is not None:
                    with contextlib.suppress(OSError):  # other shuffles of the app are still there
                        app_dir.rmdir()
            return len(gone)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for f in self._open.values():
                f._kill("closed")
            self._open.clear()
            self._readers.clear()
            self._fds.close()

    def __enter__(self) -> DiskPartitionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (store lock held unless said otherwise) -----------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("the partition store is closed")

    def _make_dirs(self, disk: int, key: LocationKey) -> Path:
        root = self._dirs[disk]
        app_dir = root / key.app_id
        directory = app_dir / str(key.shuffle_id)
        if directory.is_dir():
            return directory
        new_app = not app_dir.is_dir()
        directory.mkdir(parents=True, exist_ok=True)
        # Make the new names durable, or a committed file could vanish with its directory.
        if self.fsync:
            _fsync_dir(self._fds, app_dir)
            if new_app:
                _fsync_dir(self._fds, root)
        return directory

    def _lookup(self, key: LocationKey) -> tuple[CommittedFile, int] | None:
        """The committed file for ``key``: cached, or loaded from whichever dir has it."""
        entry = self._committed.get(key)
        if entry is not None:
            return entry
        first = disk_for(key, len(self._dirs))
        for disk in [first, *(i for i in range(len(self._dirs)) if i != first)]:
            if (self.location_dir(disk, key) / (key.name + INDEX_SUFFIX)).exists():
                entry = self._load(disk, key)
                if entry is not None:
                    self._committed[key] = entry
                    return entry
        return None

    def _load(self, disk: int, key: LocationKey) -> tuple[CommittedFile, int] | None:
        """Read and check one ``.index`` and its ``.data``; warn and return None if they do not hold."""
        d = self.location_dir(disk, key)
        index_path = d / (key.name + INDEX_SUFFIX)
        data_path = d / (key.name + DATA_SUFFIX)
        try:
            index = decode_index(index_path.read_bytes(), key)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("skipping damaged index %s: %s", index_path, exc)
            return None
        try:
            size = data_path.stat().st_size
        except OSError as exc:
            log.warning("skipping %s: its data file cannot be found: %s", index_path, exc)
            return None
        if size != index.size:
            log.warning(
                "skipping %s: %s holds %d bytes, the index says %d", index_path, data_path, size, index.size
            )
            return None
        return CommittedFile(key, index), disk

    # -- called by DiskPartitionFile (without its lock) ---------------------------------------------

    def _committed_file(self, f: DiskPartitionFile, done: CommittedFile) -> None:
        with self._lock:
            # A concurrent remove() or close() may have dropped the location meanwhile.
            if self._open.get(f.key) is f:
                del self._open[f.key]
                self._committed[f.key] = (done, f.disk)

    def _forget(self, f: DiskPartitionFile) -> None:
        with self._lock:
            if self._open.get(f.key) is f:
                del self._open[f.key]


def _walk(
    root: Path, app_id: str | None = None, shuffle_id: int | None = None
) -> Iterator[tuple[LocationKey, Path]]:
    """Every well-named partition file under ``root`` (or under one app or shuffle), with its key.

    Names that are not ours are ignored; ``.index.tmp`` files are yielded too.
    """
    apps = [app_id] if app_id is not None else _listdir(root)
    for app in apps:
        try:
            ids.app_id(app)
        except BadRequest:
            continue
        shuffles = [str(shuffle_id)] if shuffle_id is not None else _listdir(root / app)
        for shuffle in shuffles:
            if not _INT_RE.fullmatch(shuffle):
                continue
            directory = root / app / shuffle
            for name in _listdir(directory):
                m = _FILE_RE.fullmatch(name)
                if m is None:
                    continue
                key = LocationKey(app, int(shuffle), int(m[1]), int(m[2]), m[3])
                try:
                    key.validate()
                except BadRequest:  # a number beyond 2**31-1
                    continue
                yield key, directory / name


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise _os_error("list", path, exc) from exc
