"""``keep_heap``: a worker process keeps the heap pages it faulted in (issue 25).

A worker's data path allocates a buffer per received message (libzmq, on its I/O thread) and
per read (Python's ``bytes``), 64 KiB to a few MiB each. With glibc's defaults such buffers
are ``mmap``'ed and unmapped one by one, or come from the top of a heap that is trimmed as
soon as it is freed, so nearly every byte received lands on a page the kernel must fault in
and zero again: ``perf`` over a replicated ``croupier bench --scenarios raw`` put a sixth of
the workers' CPU in ``clear_page`` under the ZeroMQ I/O thread alone.

``keep_heap`` makes glibc serve them from one heap that it does not give back (one arena, a
32 MiB ``mmap`` threshold, the heap grown 64 MiB at a time, trimmed only when more than
``keep`` bytes are free at its top), as ``ceiling-tuned`` does (``tools/ceiling.py``). The
resident heap then stays at its peak, which the worker's memory cap (``--memory``, the
``keep`` given) bounds: buffered data is what fills it. Only ``croupier worker`` calls it, at
start-up before its threads exist; it does nothing where ``mallopt`` is not glibc's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["keep_heap"]

log = logging.getLogger(__name__)

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TOP_PAD = 64 * 1024 * 1024


def keep_heap(keep: int) -> bool:
    """Tune this process's glibc malloc as above; whether every setting was taken."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no mallopt here (%s): the heap is left as it is", name)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    keep = max(MMAP_THRESHOLD, min(keep, 2**31 - 1))  # an int
    settings = (
        (_M_ARENA_MAX, 1),
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (_M_TOP_PAD, TOP_PAD),
        (_M_TRIM_THRESHOLD, keep),
    )
    ok = all([mallopt(param, value) == 1 for param, value in settings])
    if not ok:
        log.warning("mallopt refused some of %s: the heap may be given back and faulted in again", settings)
    return ok
