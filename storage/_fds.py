"""The descriptors of a ``DiskPartitionStore``: one bounded LRU, and the writes through it.


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
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from croupier.core.errors import Unavailable

__all__ = ["FdCache", "Handle", "SourceError", "byte_views", "copy_prefix", "fsync_dir", "writev_all"]

log = logging.getLogger("croupier.storage.disk")

READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC

_COPY_STEP = 1024 * 1024


def _iov_max() -> int:
    try:
        value = os.sysconf("SC_IOV_MAX")
    except (ValueError, OSError):
        return 1024
    return value if value > 0 else 1024


IOV_MAX = _iov_max()


class Handle:
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


class FdCache:
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
        self._idle: OrderedDict[Handle, None] = OrderedDict()
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    @contextmanager
    def use(self, h: Handle) -> Iterator[int]:
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

    def discard(self, h: Handle) -> None:
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

    def _close(self, h: Handle) -> None:
        # lock held; h is not in _idle
        fd, h.fd, h.drop = h.fd, None, False
        if fd is None:
            return
        self._count -= 1
        try:
            os.close(fd)
        except OSError as exc:  # data is made durable by fsync at commit, which reports write errors
            log.warning("closing %s failed: %s", h.path, exc)


def byte_views(pieces: Sequence[bytes | memoryview]) -> tuple[list[bytes | memoryview], int]:
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


def writev_all(fd: int, views: list[bytes | memoryview]) -> None:
    """Write every view with as few ``os.writev`` calls as possible, resuming after short writes."""
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i : i + IOV_MAX])
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


def fsync_dir(fds: FdCache, path: Path) -> None:
    fd = fds.open_raw(str(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        fds.close_raw(fd)


class SourceError(Exception):
    """Reading the bytes to move failed: the old dir's fault, not the new one's."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(str(exc))
        self.exc = exc


def copy_prefix(src: Path, dst: Path, size: int) -> None:
    """Write the first ``size`` bytes of ``src`` to a new ``dst`` (OSError: the writing failed;
    ``SourceError``: the reading did)."""
    try:
        fin = open(src, "rb")  # noqa: SIM115 - closed below; errors must be told apart
    except FileNotFoundError:
        if size:
            raise SourceError(OSError(errno.ENOENT, f"{src} is gone")) from None
        fin = None
    try:
        with open(dst, "wb") as fout:
            left = size
            while left:
                try:
                    chunk = fin.read(min(left, _COPY_STEP)) if fin is not None else b""
                except OSError as exc:
                    raise SourceError(exc) from exc
                if not chunk:
                    raise SourceError(OSError(errno.EIO, f"{src} ends {left} bytes early"))
                fout.write(chunk)
                left -= len(chunk)
    finally:
        if fin is not None:
            fin.close()
