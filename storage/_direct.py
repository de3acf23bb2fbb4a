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
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from croupier.storage._fds import writev_all

__all__ = ["ALIGN", "STAGE", "read_direct", "supports_direct", "write_direct"]

ALIGN = 4096
STAGE = 4 * 1024 * 1024  # bytes a thread stages per write call; reads use up to READ_STAGE
READ_STAGE = 8 * 1024 * 1024 + 2 * ALIGN
_GROW = 256 * 1024

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
        want = min(len(view), -(-(end - start) // ALIGN) * ALIGN)
        got = 0
        while got < want:
            n = os.preadv(fd, [view[got:want]], start + got)
            if n <= 0:
                break
            got += n
            if got % ALIGN:  # the end of the file
                break
        take = min(end, start + got) - at
        if take <= 0:
            raise OSError(errno.EIO, f"the file ends at {start + got}, before {end}")
        parts.append(bytes(view[at - start : at - start + take]))
        at += take
    return parts[0] if len(parts) == 1 else b"".join(parts)
