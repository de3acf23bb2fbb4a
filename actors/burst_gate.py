"""``BurstGate``: a burst of requests decided on the thread that read it (issue 27).

The master's RPC server thread reads a burst of requests; when the master actor is idle,
the burst is decided right there, under the gate's lock, which the actor holds while it
handles any message of its own; else the burst goes to the actor as one ``SubmitMany``. So
the state has one writer at a time, the commands keep their order, and a burst decided on
the RPC thread costs no actor message and no wake-up of the actor's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from croupier.core.commands import Command
from croupier.core.errors import CroupierError

__all__ = ["Burst", "BurstGate", "ReplyFn"]

ReplyFn = Callable[[dict[str, Any] | None, CroupierError | None], None]
Burst = list[tuple[Command, ReplyFn | None]]


class BurstGate:
    """Decides a burst on the caller's thread when the master actor is idle (issue 27).

    State:
        lock        held by the actor while it handles a message, and by ``run`` meanwhile
        told        bursts the caller sent through the mailbox (the caller's thread writes it)
        handled     of those, the ones the actor has handled (the actor's thread writes it)
        ordered     orders (``Reload``, ``SetWritable``) told to the actor by any thread (under
                    ``_order_lock``), and ``obeyed``, of those, the ones it has handled: a burst
                    decided here before the actor took an order told before it would miss it
        _handle     the actor's burst handler while it serves (set and cleared under ``lock``)

    ``run`` is called from one thread only (the RPC server's), which also counts ``told``: a
    burst decided here while an earlier one waits in the mailbox would overtake it, so ``run``
    declines until the actor has handled every burst told to it.
    """

    __slots__ = ("_handle", "_order_lock", "handled", "lock", "obeyed", "ordered", "told")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.told = 0
        self.handled = 0
        self._order_lock = threading.Lock()
        self.ordered = 0
        self.obeyed = 0  # written by the actor's thread only
        self._handle: Callable[[Burst], None] | None = None

    def open(self, handle: Callable[[Burst], None] | None) -> None:
        """Serve bursts with ``handle`` (None: no more; the caller holds ``lock``)."""
        self._handle = handle

    def order(self) -> None:
        """Count an order about to be told to the actor: bursts go to its mailbox, behind it,
        until it has obeyed (any thread)."""
        with self._order_lock:
            self.ordered += 1

    def _settled(self) -> bool:
        return self.told == self.handled and self.ordered == self.obeyed

    def run(self, items: Burst) -> bool:
        """Decide ``items`` here and now; False (nothing done) when the actor is busy, has
        bursts of this caller queued, or does not serve: then tell it ``SubmitMany``."""
        if not self._settled() or not self.lock.acquire(blocking=False):
            return False
        try:
            handle = self._handle
            if handle is None or not self._settled():
                return False
            handle(items)
            return True
        finally:
            self.lock.release()
