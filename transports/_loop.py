"""The socket loop and the cross-thread hand-off that ``RpcServer`` and ``AsyncRpcClient`` share.

A ZeroMQ socket belongs to one thread. Other threads therefore never touch it: they put what
they want sent into a :class:`Mailbox`, whose wake-up pipe the owning thread polls beside its
sockets, and the owner's :func:`run_loop` takes the mail on its next turn.

Usage::

    mailbox: Mailbox[bytes] = Mailbox()
    mailbox.open()
    poller.register(mailbox.fd, zmq.POLLIN)
    # any thread
    mailbox.put(b"reply")
    # the owning thread, each turn
    events = dict(poller.poll(1000))
    mailbox.clear(mailbox.fd in events)
    for item in mailbox.drain():
        ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import zmq

__all__ = ["Mailbox", "run_loop"]

T = TypeVar("T")

# After an unexpected error in a turn: long enough that a persistent fault does not spin the CPU.
_BACKOFF_S = 0.01


class Mailbox(Generic[T]):
    """Items handed from any thread to the one thread that owns the sockets.

    State:
        items: an unbounded queue (its producers are bounded elsewhere: each is the answer to,
            or the request of, something already counted).
        pending: whether a wake-up byte is in the pipe and not yet cleared; later producers then
            skip the write, so a burst of items costs one syscall.
        the pipe: made by :meth:`open`, closed by :meth:`close` (under a lock, so that nobody
            writes to an fd number the OS has since reused).
    """

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[T] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = False
        self._r = -1
        self._w = -1

    @property
    def fd(self) -> int:
        """The read end of the wake-up pipe, for the owner's poller (-1 before :meth:`open`)."""
        return self._r

    def open(self) -> None:
        """Make the wake-up pipe (both ends non-blocking)."""
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def close(self) -> None:
        """Close the pipe; later wake-ups are no-ops (items still queue). Idempotent."""
        with self._lock:
            for fd in (self._r, self._w):
                if fd >= 0:
                    os.close(fd)
            self._r = self._w = -1

    def put(self, item: T) -> None:
        """Queue ``item`` (any thread) and wake the owner."""
        self._items.put(item)
        self.wake()

    def wake(self) -> None:
        """Wake the owner's poll, unless a wake-up is pending already (any thread)."""
        if self._pending:
            return
        with self._lock:
            if self._w < 0:
                return
            self._pending = True
            # A full pipe means a wake-up is already pending.
            with contextlib.suppress(BlockingIOError):
                os.write(self._w, b"\x01")

    def clear(self, readable: bool) -> None:
        """The owner, each turn before :meth:`drain`: empty the pipe when ``readable``.

        The flag is cleared after reading and before the queue is drained: a producer that saw
        it set put its item in before this point, so the drain that follows takes it.
        """
        if readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._r, 4096):
                    pass
        self._pending = False

    def drain(self) -> Iterator[T]:
        """The queued items, oldest first, until the queue is empty."""
        while True:
            try:
                yield self._items.get_nowait()
            except queue.Empty:
                return


def run_loop(
    name: str, what: str, stopping: Callable[[], bool], turn: Callable[[], None], log: logging.Logger
) -> bool:
    """Call ``turn`` until ``stopping()``: the loop of a thread that owns ZeroMQ sockets.

    One bad turn never ends the thread (every later reply or callback would hang): it is logged
    to ``log`` and the loop backs off a little.

    Returns:
        False when the ZeroMQ context was terminated under the loop, else True.
    """
    while not stopping():
        try:
            turn()
        except zmq.ContextTerminated:
            log.error("%s: context terminated under a running %s", name, what)
            return False
        except Exception:
            log.exception("%s: unexpected error in the %s loop", name, what)
            time.sleep(_BACKOFF_S)
    return True
