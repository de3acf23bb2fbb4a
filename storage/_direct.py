"""``O_DIRECT`` writes and reads of a ``DiskPartitionStore`` (``direct=True``; issue 25).

On the VMs this service was measured on, every page the kernel takes from its free lists is
expensive to touch first, and a page-cache write or read takes a new one per 4 KiB: ``perf``
put ``copy_folio_from_iter_atomic`` (the flusher's ``writev`` into the page cache) at 30 % of
the workers' CPU in a replicated ``croupier bench --scenarios raw``. With ``O_DIRECT`` the
bytes go from a per-thread staging buffer, allocated and faulted in once, straight to the
device, as ``ceiling-tuned`` does (``tools/ceiling_roles.py``), and reads come back the same
way.

``O_DIRECT`` wants the buffer, the file offset and the length aligned to the device's block
(``ALIGN`` covers every block size up to 4 KiB). Each write therefore starts at the file's
last partial block (its bytes, the *tail*, under ``ALIGN``, are kept in memory by
``DiskPartitionFile``) and ends with a zero-padded block: every byte of every write is on the
device when the write returns (a flush means what it meant with the page cache), and the
commit cuts the file to its size. What is on disk then is the same file, byte for byte, as a
buffered store writes; any reader may read it.

A filesystem that refuses ``O_DIRECT`` (tmpfs before Linux 6.6, some FUSE filesystems) is
found by ``supports_direct`` when the store opens; the store then writes through the page
cache as before.

Reads for a reply (``lend_direct``, FETCH_CHUNK) go into a buffer of a small process-wide
pool (:class:`LendPool`) and come back as a view of it, which the reply sends as a zero-copy
ZeroMQ frame: no copy out of a per-thread buffer. A pooled buffer is taken again only once
nothing refers to it any more (libzmq has sent the frame and pyzmq dropped the view): every
view of it holds a reference to it, so its reference count tells. The pool keeps at most
``LEND_POOL_BYTES``; a read that finds no free buffer and no room for a new one is copied
out as before (``read_direct``), so a slow reader never makes the pool grow.

Small files go through the page cache (:func:`write_small`, ``SMALL_FILE``). For a location
of a few KiB, a padded ``O_DIRECT`` write is a synchronous device write of its last block,
and the commit's ``ftruncate`` then reads that block back to cut it (``perf``:
``ext4_block_zero_page_range``); the memory tier's read-back at commit is a device read too.
So a write that leaves its file at most ``SMALL_FILE`` bytes (every earlier write did too) is
a buffered ``pwrite`` (the descriptor's ``O_DIRECT`` is cleared for it and set again), and
a committed file of at most ``SMALL_FILE`` bytes is read buffered. The kernel keeps the page
cache and direct I/O of one file coherent, so which way a file was written never changes
what a read returns: the choice is for speed only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from croupier.storage._fds import writev_all

__all__ = [
    "ALIGN",
    "LEND_POOL",
    "SMALL_FILE",
    "STAGE",
    "LendPool",
    "lend_direct",
    "read_direct",
    "supports_direct",
    "write_direct",
    "write_small",
]

ALIGN = 4096
STAGE = 4 * 1024 * 1024  # bytes a thread stages per write call; reads use up to READ_STAGE
READ_STAGE = 8 * 1024 * 1024 + 2 * ALIGN
_GROW = 256 * 1024
LEND_POOL_BYTES = 64 * 1024 * 1024  # bytes of read buffers kept for replies (lend_direct)
# Smaller reads are copied out: ZeroMQ copies frames under 64 KiB anyway (transports/_framing.py).
LEND_MIN = 64 * 1024

SMALL_FILE = 64 * 1024  # files of at most this many bytes are written and read buffered

_local = threading.local()


def _buffer(name: str, size: int) -> mmap.mmap:
    """This thread's page-aligned buffer ``name`` of at least ``size`` bytes, faulted in once:
    grown (in steps of ``_GROW``) only when a call needs more than it has."""
    buf: mmap.mmap | None = getattr(_local, name, None)
    if buf is None or len(buf) < size:
        size = -(-size // _GROW) * _GROW
        buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # private: no shmem behind it
        for page in range(0, size, mmap.PAGESIZE):
            buf[page] = 0
        setattr(_local, name, buf)
    return buf


def supports_direct(directory: Path) -> bool:
    """Whether files in ``directory`` take aligned ``O_DIRECT`` writes (a probe file, removed)."""
    if not hasattr(os, "O_DIRECT"):
        return False
    probe = directory / f".direct-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, memoryview(_buffer("stage", ALIGN))[:ALIGN])
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()


def write_direct(fd: int, size: int, tail: bytes, pieces: Sequence[bytes | memoryview]) -> bytes:
    """Append ``pieces`` to the ``O_DIRECT`` file ``fd`` that holds ``size`` bytes, the last
    ``tail`` of them (``size % ALIGN``) in a partial block, and return the new tail.

    The write starts at that partial block (its bytes from ``tail``) and ends with a
    zero-padded one: every byte given is written, but the file may end past its size until
    the next write or the commit (``ftruncate``) cuts it.

    Raises:
        OSError: a write failed; any of the bytes from the partial block on may have been
            written (the caller cuts the file back to ``size``).
    """
    total = len(tail) + sum(len(piece) for piece in pieces)
    cap = max(ALIGN, min(STAGE, -(-total // ALIGN) * ALIGN))
    view = memoryview(_buffer("stage", cap))
    os.lseek(fd, size - len(tail), os.SEEK_SET)
    fill = len(tail)
    view[:fill] = tail
    for piece in pieces:
        src = memoryview(piece)
        if src.format != "B":  # a flat buffer of another one-byte format (``byte_views``)
            src = src.cast("B")
        pos, n_src = 0, len(src)
        while pos < n_src:
            n = min(cap - fill, n_src - pos)
            view[fill : fill + n] = src[pos : pos + n]
            fill += n
            pos += n
            if fill == cap:
                writev_all(fd, [view[:cap]])
                fill = 0
    keep = fill % ALIGN
    if fill:
        padded = fill + (ALIGN - keep) % ALIGN
        view[fill:padded] = bytes(padded - fill)
        writev_all(fd, [view[:padded]])
    return bytes(view[fill - keep : fill])


def write_small(fd: int, size: int, tail: bytes, pieces: Sequence[bytes | memoryview]) -> bytes | None:
    """Append ``pieces`` at ``size`` to the ``O_DIRECT`` file ``fd`` through the page cache
    (no padding: the file ends at its size), and return its new tail, as ``write_direct``;
    ``None``, with nothing written, where the descriptor's ``O_DIRECT`` cannot be cleared.

    Raises:
        OSError: a write failed (the caller cuts the file back to ``size``).
    """
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
    except OSError:
        return None
    try:
        data = b"".join(pieces)
        done = 0
        while done < len(data):
            done += os.pwrite(fd, memoryview(data)[done:], size + done)
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    keep = (size + len(data)) % ALIGN
    return (tail + data)[len(tail) + len(data) - keep :] if keep else b""


def read_direct(fd: int, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of the ``O_DIRECT`` file ``fd``, read in whole blocks.

    Raises:
        OSError: a read failed, or (``EIO``) the file ends before ``offset + length``.
    """
    at, end = offset, offset + length
    view = memoryview(_buffer("read", min(READ_STAGE, -(-(end - at) // ALIGN) * ALIGN + ALIGN)))
    parts: list[bytes] = []
    while at < end:
        start = at - at % ALIGN
        want_end = start + min(len(view), -(-(end - start) // ALIGN) * ALIGN)
        got = _readinto(fd, view, start, min(end, want_end), want_end)
        take = min(end, start + got) - at
        parts.append(bytes(view[at - start : at - start + take]))
        at += take
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _readinto(fd: int, view: memoryview, start: int, end: int, want_end: int) -> int:
    """Read the blocks of ``fd`` from ``start`` (aligned) into ``view`` until ``end`` is covered,
    ``want_end`` (aligned) bytes at most; the bytes read (short only at the end of the file)."""
    want = want_end - start
    got = 0
    while got < want:
        n = os.preadv(fd, [view[got:want]], start + got)
        if n <= 0:
            break
        got += n
        if got % ALIGN:  # the end of the file
            break
    if start + got < end:
        raise OSError(errno.EIO, f"the file ends at {start + got}, before {end}")
    return got


class LendPool:
    """Page-aligned read buffers lent to replies, reused once nothing refers to them.

    A buffer is free when the pool holds the only reference to it: every memoryview of an
    ``mmap`` (and every slice of such a view) holds one through its buffer. At most
    ``capacity`` bytes are kept; ``lent`` and ``copied`` count the reads served from the pool
    and those copied out because no buffer was free.
    """

    def __init__(self, capacity: int = LEND_POOL_BYTES) -> None:
        self.capacity = capacity
        self._bufs: list[mmap.mmap] = []
        self._bytes = 0
        self._lock = threading.Lock()
        self.lent = 0
        self.copied = 0
        probe = [mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE)]
        self._idle = self._refs(probe, 0)  # the count of a buffer nobody else refers to
        probe[0].close()

    @staticmethod
    def _refs(bufs: list[mmap.mmap], i: int) -> int:
        return sys.getrefcount(bufs[i])

    @property
    def kept(self) -> int:
        """Bytes of buffers the pool holds, lent or free."""
        return self._bytes

    @property
    def free(self) -> int:
        """Bytes of buffers the pool holds that nothing else refers to."""
        with self._lock:
            bufs = self._bufs
            return sum(len(bufs[i]) for i in range(len(bufs)) if self._refs(bufs, i) == self._idle)

    def take(self, size: int) -> mmap.mmap | None:
        """A free buffer of at least ``size`` bytes (a new one if there is room), else None.
        The caller drops every reference to it but the views it hands out."""
        with self._lock:
            bufs = self._bufs
            best = -1
            for i in range(len(bufs)):
                fits = len(bufs[i]) >= size and (best < 0 or len(bufs[i]) < len(bufs[best]))
                if fits and self._refs(bufs, i) == self._idle:
                    best = i
            if best >= 0:
                self.lent += 1
                return bufs[best]
            size = -(-size // _GROW) * _GROW
            if self._bytes + size > self.capacity:
                # room made by dropping free buffers that are too small
                for i in range(len(bufs) - 1, -1, -1):
                    if self._bytes + size <= self.capacity:
                        break
                    if self._refs(bufs, i) == self._idle:
                        self._bytes -= len(bufs[i])
                        bufs.pop(i).close()
                if self._bytes + size > self.capacity:
                    self.copied += 1
                    return None
            buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
            bufs.append(buf)
            self._bytes += size
            self.lent += 1
            return buf


LEND_POOL = LendPool()


def lend_direct(fd: int, offset: int, length: int, pool: LendPool = LEND_POOL) -> bytes | memoryview:
    """``length`` bytes at ``offset`` of the ``O_DIRECT`` file ``fd``, as a view of a buffer of
    ``pool`` (send it and drop it; the buffer is reused once no view of it is left), or copied
    out (``read_direct``) when the pool has no buffer free.

    Raises:
        OSError: a read failed, or (``EIO``) the file ends before ``offset + length``.
    """
    start = offset - offset % ALIGN
    end = offset + length
    want_end = -(-end // ALIGN) * ALIGN
    buf = pool.take(want_end - start) if length >= LEND_MIN else None
    if buf is None:
        return read_direct(fd, offset, length)
    whole = memoryview(buf)
    del buf  # from here the view alone holds the buffer
    try:
        _readinto(fd, whole, start, end, want_end)
    except BaseException:
        whole.release()  # the buffer is free again
        raise
    return whole[offset - start : end - start]
