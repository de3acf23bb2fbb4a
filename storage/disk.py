"""``DiskPartitionStore``: a worker's partition files on its local disks.

Layout (DESIGN §10)
-------------------

One directory per disk, given to the store in order (disk ``i`` is ``dirs[i]``)::

    <dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.data        the batches, back to back
    <dir>/<app_id>/<shuffle_id>/index.log                               a record per commit
    <dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.index       older versions' index
    <dir>/<app_id>/key_tag                                             the app's key tag
    <dir>/+free/<n>                                                    emptied files, reused

``app_id`` is validated by ``croupier.core.ids.app_id`` and the numbers are
non-negative decimal integers without leading zeros; ``role`` is ``primary``
or ``replica``. Every id is validated before it is used in a path.

A new location goes to disk ``crc32("<app_id>/<shuffle_id>/<partition>-<epoch>-<role>") %
len(dirs)`` (:func:`croupier.storage.store.disk_for`): stable across restarts
and spread evenly. Lookups still search every dir, so adding a dir to a worker
does not hide its older files.

Index
-----

A location's index is one line of checked JSON (:mod:`croupier.storage.index_file`), kept
in its dir's index log (:mod:`croupier.storage.index_log`), not in a file of its own:
creating files was most of the workers' CPU at 6,400 partitions (issue 25). ``.index``
files (and ``.index.tmp``) that an older version wrote are still read, and deleted when
their location is written again.

A location is *committed* exactly when its last record passes all of those checks. A
record that fails one (damaged, from another version, or beside a missing or wrongly
sized ``.data``) is skipped with a warning and the location counts as not committed;
``create`` for that key then deletes its ``.data`` and appends a void record to the log,
so the new data is never read with the old index.

Commit: close the ``.data``; append its record to the log. With ``fsync=True`` (the
store's default) the ``.data`` and the log are fsync'ed too, the directory when the log is
new, and directories are fsync'ed into their parents when ``create`` makes them. Without it
a commit survives the process but not an OS crash: a ``.data`` torn by one fails the batch
digests readers check, so it is read from the other copy or reported lost, never returned
wrong.

Descriptors (DESIGN §11), free space and health (issue 15)
-----------------------------------------------------------

Descriptors are opened late and kept in one bounded LRU: :mod:`croupier.storage._fds`.
Each dir's reserve, health and the choice of a dir for a location:
:mod:`croupier.storage._dirs`. A write (or commit) that fails is undone and retried on
another healthy dir of the store: the bytes already written are copied there, then the
call is written again, and the old file is deleted. Only when no healthy dir takes it does
the call raise (``Unavailable``, ``details.no_space`` true when the failures were ``ENOSPC``).

With ``direct=True`` (the worker's default) the ``.data`` files are written and read with
``O_DIRECT`` (:mod:`croupier.storage._direct`): every write rewrites the file's last partial
block and pads its own, the commit cuts the file to its size; the files are the same. Files
of at most ``SMALL_FILE`` (64 KiB) are written and read through the page cache instead.

A removed shuffle's ``.data`` files are emptied and kept in ``+free`` (at most
``POOL_FILES`` per dir), and a new location's file is one of them when there is one
(:mod:`croupier.storage._pool`): a file created costs 250 to 600 µs of CPU here, a reused one 30.

Uncommitted ``.data`` files left by a crash stay on disk (``scan`` ignores
them) until ``create`` reuses the location or ``remove`` deletes the shuffle.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from croupier.core import ids
from croupier.core.errors import Conflict, NotCommitted, Unavailable, UnknownShuffle
from croupier.storage._direct import (
    SMALL_FILE,
    lend_direct,
    read_direct,
    supports_direct,
    write_direct,
    write_small,
)
from croupier.storage._dirs import NO_SPACE, DirHealth, default_reserve
from croupier.storage._fds import (
    READ_FLAGS,
    WRITE_FLAGS,
    FdCache,
    Handle,
    SourceError,
    byte_views,
    copy_prefix,
    fsync_dir,
    writev_all,
)
from croupier.storage._layout import (
    DATA_SUFFIX,
    INDEX_SUFFIX,
    INT_RE,
    TMP_SUFFIX,
    CleanDirs,
    listdir,
    os_error,
    shuffle_dirs,
    walk,
)
from croupier.storage._pool import FilePool
from croupier.storage.index_file import INDEX_VERSION, decode_index, encode_index, encode_void
from croupier.storage.index_log import LOG_NAME, IndexLogs
from croupier.storage.key_tag_file import KEY_TAG_FILE, read_key_tag, write_key_tag
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

# -- files and the store --------------------------------------------------------------------------


class DiskPartitionFile:
    """An open location of a :class:`DiskPartitionStore` (see :class:`PartitionFile`).

    State:
        key, disk: the location and the index of the dir holding it.
        data_path: its data file (its index goes to the dir's index log at commit).
        _size: bytes written (and kept) so far.
        _state: ``open``; ``failed`` (a failed write could not be undone: writes and commit raise
            Unavailable); ``committed``; ``aborted``; ``removed``; ``closed`` (with the store).
        _lock: serialises write/commit/abort against ``remove`` and ``close``.
    """

    def __init__(self, store: DiskPartitionStore, key: LocationKey, disk: int, directory: Path) -> None:
        self.key = key
        self.disk = disk
        self.data_path = directory / (key.name + DATA_SUFFIX)
        self._store = store
        self._handle = Handle(self.data_path, store._write_flags)
        self._size = 0
        self._tail = b""  # O_DIRECT: the bytes of the file's last partial block (written too)
        self._padded = False  # O_DIRECT: a padded write may have left the file past its size
        self._state = "open"
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        views, total = byte_views(pieces)
        with self._lock:
            if self._state != "open":
                raise Unavailable(f"cannot write to {self.data_path}: it is {self._state}")
            if not total:
                return
            tried: set[int] = set()
            no_space = True
            while True:
                try:
                    self._store._health.check_room(self.disk, total)
                    self._write_here(list(views))  # a copy: a short write replaces its items
                except OSError as exc:
                    error = os_error("write", self.data_path, exc)
                    no_space = no_space and exc.errno in NO_SPACE
                    self._store._health.write_failed(self.disk, exc)
                    tried.add(self.disk)
                    if self._state != "open" or not self._move(tried, total):
                        raise Unavailable(error.message, {"no_space": no_space}) from exc
                    continue
                self._size += total
                return

    def _write_here(self, views: list[bytes | memoryview]) -> None:
        with self._store._fds.use(self._handle) as fd:
            try:
                if self._store.direct:
                    small = not self._padded and self._size + sum(len(v) for v in views) <= SMALL_FILE
                    tail = write_small(fd, self._size, self._tail, views) if small else None
                    if tail is None:
                        self._padded = True
                        tail = write_direct(fd, self._size, self._tail, views)
                    self._tail = tail
                else:
                    writev_all(fd, views)
            except OSError:
                self._undo(fd)
                raise

    def _move(self, tried: set[int], need: int) -> bool:
        """Copy what was written here to another healthy dir and go on there (file lock held).
        False when no dir takes it (or the bytes here cannot be read back)."""
        store = self._store
        while True:
            disk = store._health.choose(self.key, tried, self._size + need, strict=True)
            if disk is None:
                return False
            tried.add(disk)
            target: Path | None = None
            try:
                directory = store._make_dirs(disk, self.key)
                target = directory / (self.key.name + DATA_SUFFIX)
                copy_prefix(self.data_path, target, self._size)
            except SourceError as exc:
                log.error("cannot move %s: reading it failed: %s", self.data_path, exc)
                if target is not None:
                    target.unlink(missing_ok=True)
                return False
            except OSError as exc:
                store._health.write_failed(disk, exc)
                if target is not None:
                    with contextlib.suppress(OSError):
                        target.unlink(missing_ok=True)
                continue
            store._fds.discard(self._handle)
            with contextlib.suppress(OSError):
                self.data_path.unlink(missing_ok=True)
            log.warning("moved %s (%d bytes) to %s after a failed write", self.data_path, self._size, target)
            self.disk, self.data_path = disk, target
            self._handle = Handle(target, store._write_flags)
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
                    error = os_error("commit", self.data_path, exc)
                    self._store._health.write_failed(self.disk, exc)
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
            if self._padded:
                os.ftruncate(fd, self._size)  # its last block was written padded
            if durable:
                os.fsync(fd)
        fds.discard(self._handle)
        # the commit: one record appended to the dir's index log (storage/index_log.py)
        self._store._logs.of(self.data_path.parent).append(self.key, index, encode_index(self.key, index))

    def abort(self) -> None:
        with self._lock:
            if self._state not in ("open", "failed"):
                return
            self._state = "aborted"
            self._store._fds.discard(self._handle)
            try:
                self.data_path.unlink(missing_ok=True)
            except OSError as exc:  # cleanup: the next remove() of the shuffle tries again
                log.warning("cannot delete %s: %s", self.data_path, exc)
        self._store._forget(self)

    def _kill(self, state: str) -> None:
        """Called by the store's ``remove`` (``removed``) and ``close`` (``closed``)."""
        with self._lock:
            if self._state in ("open", "failed"):
                self._state = state
                self._store._fds.discard(self._handle)


class DiskPartitionStore:
    """Partition files in one directory per disk (layout and index format: module docstring).

    Parameters:
        dirs: one directory per disk (created if missing); disk ``i`` is ``dirs[i]``.
        max_open_files: the bound on descriptors kept open for writers and readers.
        reserve: free bytes each dir keeps (None: ``default_reserve`` of its filesystem).
        direct: write and read ``.data`` files with ``O_DIRECT`` (``storage/_direct.py``),
            if every dir takes it; ``direct`` tells whether it is on.

    State:
        _dirs: absolute paths of the dirs.
        _fds: the shared descriptor LRU.
        _open: locations created and not yet committed, aborted or removed.
        _committed: committed locations seen so far (committed here, found by
            ``scan``, or looked up on disk): ``key -> (file, disk)``.
        _readers: descriptor handles of committed files that were read.
        _tags: the key tag written (or read) per app, so a tag is written once per app.
        _health: the dirs' free space and health (``croupier.storage._dirs``).
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
        direct: bool = False,
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
                raise os_error("create the storage directory", p, exc) from exc
        self._dirs = tuple(paths)
        self.fsync = fsync
        # O_DIRECT only where every dir takes it (storage/_direct.py)
        self.direct = direct and all(supports_direct(p) for p in paths)
        # a direct writer seeks to its last partial block (no O_APPEND)
        self._write_flags = (WRITE_FLAGS & ~os.O_APPEND) | os.O_DIRECT if self.direct else WRITE_FLAGS
        self._read_flags = READ_FLAGS | os.O_DIRECT if self.direct else READ_FLAGS
        self._health = DirHealth(self._dirs, reserve)
        self._fds = FdCache(max_open_files)
        self._open: dict[LocationKey, DiskPartitionFile] = {}
        self._committed: dict[LocationKey, tuple[CommittedFile, int]] = {}
        self._readers: dict[LocationKey, Handle] = {}
        self._clean = CleanDirs(self._dirs)
        self._logs = IndexLogs(self._fds, fsync)
        self._pool = FilePool(self._dirs)
        self._tags: dict[str, str] = {}
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
        return self._health.states()

    @property
    def reserve(self) -> int | None:
        """Free bytes each dir keeps (None: ``default_reserve`` of its filesystem)."""
        return self._health.reserve

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
            disk = self._health.choose(key, set())
            if disk is None:
                raise Unavailable(f"cannot create {where}: no healthy directory is left", {"no_space": False})
            try:
                # Files of an earlier life: uncommitted data, a record that does not hold, an
                # older version's index (none in a dir this store made or found missing: CleanDirs)
                for i in range(len(self._dirs)):
                    if self._clean.clean(i, key):
                        continue
                    d = self.location_dir(i, key)
                    for suffix in (DATA_SUFFIX, INDEX_SUFFIX, TMP_SUFFIX):
                        (d / (key.name + suffix)).unlink(missing_ok=True)
                    index_log = self._logs.of(d)
                    if index_log.get(key) is not None:  # voided before new data is written
                        index_log.append(key, None, encode_void(key))
                directory = self._make_dirs(disk, key)
            except OSError as exc:
                raise os_error("create", where, exc) from exc
            self._pool.take(disk, directory / (key.name + DATA_SUFFIX))  # else the first open makes it
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
        return cast(bytes, self._read(key, offset, length, lend=False))

    def read_view(self, key: LocationKey, offset: int, length: int) -> bytes | memoryview:
        """``read``; with ``O_DIRECT``, a view of a pooled buffer (``storage/_direct.py``)."""
        return self._read(key, offset, length, lend=True)

    def _read(self, key: LocationKey, offset: int, length: int, *, lend: bool) -> bytes | memoryview:
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
                flags = self._read_flags if done.index.size > SMALL_FILE else READ_FLAGS
                handle = self._readers[key] = Handle(path, flags)
        check_range(key, offset, length, done.index.size)
        if not length:
            return b""
        try:
            with self._fds.use(handle) as fd:
                if handle.flags & os.O_DIRECT:
                    return lend_direct(fd, offset, length) if lend else read_direct(fd, offset, length)
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
            raise os_error("read", handle.path, exc) from exc
        return data

    def scan(self, app_id: str | None = None, shuffle_id: int | None = None) -> list[CommittedFile]:
        check_scope(app_id, shuffle_id)
        with self._lock:
            self._check_open()
            found: dict[LocationKey, tuple[CommittedFile, int]] = {}
            for disk, root in enumerate(self._dirs):
                for key in self._indexed(root, app_id, shuffle_id):
                    if key in self._open:
                        continue
                    # a file committed or loaded here before is not read again
                    cached = self._committed.get(key)
                    entry = cached if cached is not None and cached[1] == disk else self._load(disk, key)
                    if entry is None:
                        continue
                    if key in found:
                        log.warning("skipping %s on disk %d: it is also on disk %d", key, disk, found[key][1])
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
            self._clean.forget(app_id, shuffle_id)
            for disk, root in enumerate(self._dirs):
                app_dir = root / app_id
                self._logs.forget(app_dir, shuffle_id)
                target = app_dir if shuffle_id is None else app_dir / str(shuffle_id)
                if not target.is_dir():
                    continue
                for key, path in walk(root, app_id, shuffle_id):
                    gone.add(key)
                    if path.name.endswith(DATA_SUFFIX):
                        self._pool.put(disk, path)  # emptied, for a later location (storage/_pool.py)
                try:
                    shutil.rmtree(target)
                except OSError as exc:
                    raise os_error("remove", target, exc) from exc
                if shuffle_id is not None and not any(INT_RE.fullmatch(n) for n in listdir(app_dir)):
                    self._tags.pop(app_id, None)  # no shuffle left here: the tag goes with the dir
                    with contextlib.suppress(OSError):
                        (app_dir / KEY_TAG_FILE).unlink(missing_ok=True)
                        app_dir.rmdir()
            if shuffle_id is None:
                self._tags.pop(app_id, None)
            return len(gone)

    def save_key_tag(self, app_id: str, tag: str) -> None:
        ids.app_id(app_id)
        with self._lock:
            self._check_open()
            if self._tags.get(app_id) == tag:
                return
            for root, state in zip(self._dirs, self._health.states(), strict=True):
                if not state.healthy:  # a full disk still gets it: its files may be there
                    continue
                try:
                    write_key_tag(root / app_id, tag, fsync=self.fsync, fds=self._fds)
                except OSError as exc:  # the files are served in this life; refused after a restart
                    log.warning("cannot keep the key tag of app %s in %s: %s", app_id, root, exc)
                    return
            self._tags[app_id] = tag

    def key_tag(self, app_id: str) -> str | None:
        ids.app_id(app_id)
        with self._lock:
            self._check_open()
            if app_id in self._tags:
                return self._tags[app_id]
            found = {t for root in self._dirs if (t := read_key_tag(root / app_id)) is not None}
            if len(found) > 1:
                log.warning("app %s has different key tags on different disks: none is trusted", app_id)
                return None
            tag = found.pop() if found else None
            if tag is not None:
                self._tags[app_id] = tag
            return tag

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
        if os.path.isdir(directory):
            return directory
        new_app = not os.path.isdir(app_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self._clean.made(disk, key)
        # Make the new names durable, or a committed file could vanish with its directory.
        if self.fsync:
            fsync_dir(self._fds, app_dir)
            if new_app:
                fsync_dir(self._fds, root)
        return directory

    def _lookup(self, key: LocationKey) -> tuple[CommittedFile, int] | None:
        """The committed file for ``key``: cached, or loaded from whichever dir has it."""
        entry = self._committed.get(key)
        if entry is not None:
            return entry
        first = disk_for(key, len(self._dirs))
        for disk in [first, *(i for i in range(len(self._dirs)) if i != first)]:
            if self._clean.clean(disk, key):  # what this store committed there is cached
                continue
            entry = self._load(disk, key)
            if entry is not None:
                self._committed[key] = entry
                return entry
        return None

    def _indexed(self, root: Path, app_id: str | None, shuffle_id: int | None) -> list[LocationKey]:
        """The keys that the index logs (or older versions' ``.index`` files) under ``root`` name."""
        keys: dict[LocationKey, None] = {}
        for directory in shuffle_dirs(root, app_id, shuffle_id):
            try:
                keys.update(dict.fromkeys(self._logs.of(directory).records()))
            except OSError as exc:
                log.warning("skipping the index log of %s: %s", directory, exc)
        for key, path in walk(root, app_id, shuffle_id):
            if path.name.endswith(INDEX_SUFFIX):
                keys[key] = None
        return list(keys)

    def _load(self, disk: int, key: LocationKey) -> tuple[CommittedFile, int] | None:
        """``key``'s record in the dir's index log (or an older version's ``.index``), checked
        against its ``.data``; warn and return None if they do not hold."""
        d = self.location_dir(disk, key)
        where = f"{key.name}'s record in {d / LOG_NAME}"
        try:
            index = self._logs.of(d).get(key)
        except OSError as exc:
            log.warning("skipping the index log %s: %s", d / LOG_NAME, exc)
            index = None
        if index is None:
            index_path = d / (key.name + INDEX_SUFFIX)
            where = str(index_path)
            try:
                index = decode_index(index_path.read_bytes(), key)
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as exc:
                log.warning("skipping damaged index %s: %s", index_path, exc)
                return None
        data_path = d / (key.name + DATA_SUFFIX)
        try:
            size = data_path.stat().st_size
        except OSError as exc:
            log.warning("skipping %s: its data file cannot be found: %s", where, exc)
            return None
        if size != index.size:
            log.warning("skipping %s: %s holds %d bytes, it says %d", where, data_path, size, index.size)
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
