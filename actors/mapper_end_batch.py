"""``MAPPER_END_BATCH`` at the master's front: one request, its ``MapperEnd``s decided one by one.

The front expands a ``MapperEndBatch`` into the ``MapperEnd`` of each entry, in order, in
the burst it is reading, each with a reply that fills its slot; the last one to arrive
answers the request with every slot. The actor, the decisions, the events and their
replay are those of single ``MAPPER_END``s: only the request, its signature check and its
reply are shared.

An entry refused for the master's sake rather than its own (a ``retriable`` error:
``NOT_LEADER``, ``UNAVAILABLE`` while it steps down, cannot log or stops) makes the whole
reply that error, so the client retries the batch; the entries already logged answer the
same again (``MAPPER_END`` is idempotent: the first attempt logged wins).

Threads: the replies arrive on the committer's thread, or on the RPC thread for an entry
refused at once; the slots are filled under a lock.
"""

from __future__ import annotations

import threading
from typing import Any

from croupier.actors.burst_gate import Burst, ReplyFn
from croupier.core.commands import MapperEndBatch
from croupier.core.errors import CroupierError

__all__ = ["expand"]


class _Slots:
    """The replies of one batch's entries, answered together once the last one is in."""

    __slots__ = ("_error", "_left", "_lock", "_reply", "_results")

    def __init__(self, n: int, reply: ReplyFn) -> None:
        self._results: list[dict[str, Any] | None] = [None] * n
        self._left = n
        self._error: CroupierError | None = None
        self._lock = threading.Lock()
        self._reply = reply

    def filler(self, i: int) -> ReplyFn:
        def fill(body: dict[str, Any] | None, error: CroupierError | None) -> None:
            self._fill(i, body, error)

        return fill

    def _fill(self, i: int, body: dict[str, Any] | None, error: CroupierError | None) -> None:
        with self._lock:
            if error is None:
                self._results[i] = body
            elif error.retriable:
                self._error = self._error or error
            else:
                self._results[i] = {"error": {"status": error.status, **error.to_wire()}}
            self._left -= 1
            if self._left:
                return
        if self._error is not None:
            self._reply(None, self._error)
        else:
            self._reply({"results": self._results}, None)


def expand(command: MapperEndBatch, reply: ReplyFn) -> Burst:
    """The burst items of ``command``'s entries: each a ``MapperEnd`` and its slot's reply."""
    slots = _Slots(len(command.ends), reply)
    return [(end, slots.filler(i)) for i, end in enumerate(command.commands())]
