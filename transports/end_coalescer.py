"""``EndCoalescer``: the ``MAPPER_END``s of one process's concurrent map tasks, sent together.

A group commit on the client's side: the first caller sends its ``MapperEnd`` at once;
callers that arrive while it is in flight queue, and when it returns the first of them sends
every queued end of its shuffle as one ``MAPPER_END_BATCH`` (up to ``MAX_ENDS_PER_CALL`` and
about ``max_bytes`` of body), then hands on to the next. One caller alone pays nothing
extra; many pay one request per round trip instead of one each. Each caller gets its own
entry's reply or error; an error of the whole call (no leader in time, the client closed)
reaches every caller in it. A batch refused whole with ``BAD_REQUEST`` (a master that
predates ``MAPPER_END_BATCH``, or a malformed entry) is sent again one end at a time.

Usage (``MasterClient.request`` does this for every ``MapperEnd``)::

    ends = EndCoalescer(master.call)
    reply = ends.end(MapperEnd(app, shuffle, map_id, attempt, touched, bitmap))
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from croupier.core.commands import MAX_ENDS_PER_CALL, Command, MapperEnd, MapperEndBatch
from croupier.core.errors import BadRequest, CroupierError, InternalError
from croupier.core.replies import MapperEndReply, decode_reply, mapper_end_results

__all__ = ["EndCoalescer"]

_ENTRY_BYTES = 48  # an entry's JSON beside its bitmap: four ints, brackets, quotes and commas
_MAX_BYTES = 256 * 1024  # a batch's body stays far below the master's largest frame (1 MiB)


class _Waiter:
    __slots__ = ("command", "done", "leads", "outcome", "woken")

    def __init__(self, command: MapperEnd) -> None:
        self.command = command
        self.woken = threading.Event()
        self.done = False
        self.leads = False
        self.outcome: MapperEndReply | CroupierError | None = None

    def finish(self, outcome: MapperEndReply | CroupierError) -> None:
        self.outcome, self.done = outcome, True
        self.woken.set()

    def lead(self) -> None:
        self.leads = True
        self.woken.set()


class EndCoalescer:
    """Thread-safe; ``call`` sends one command and returns its reply body (retrying as it must)."""

    def __init__(
        self,
        call: Callable[[Command], dict[str, Any]],
        *,
        max_ends: int = MAX_ENDS_PER_CALL,
        max_bytes: int = _MAX_BYTES,
    ) -> None:
        self._call = call
        self._max_ends = max_ends
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._pending: list[_Waiter] = []
        self._busy = False  # a caller is sending: the others queue behind it
        self.requests = 0  # sent, for tests and the bench

    def end(self, command: MapperEnd) -> MapperEndReply:
        """Send ``command`` (with whatever else is queued); its reply.

        Raises:
            CroupierError: the master refused this entry, or the call failed as a whole.
        """
        waiter = _Waiter(command)
        with self._lock:
            self._pending.append(waiter)
            leads = not self._busy
            self._busy = True
        if not leads:
            waiter.woken.wait()
        if not waiter.done:
            self._send_next()
        outcome = waiter.outcome
        if isinstance(outcome, CroupierError):
            raise outcome
        assert outcome is not None
        return outcome

    def _send_next(self) -> None:
        """Send the queued ends of the first one's shuffle, then hand on to the next caller."""
        with self._lock:
            batch = self._take()
        try:
            outcomes = self._send(batch)
        except CroupierError as exc:
            outcomes = [exc] * len(batch)
        except BaseException as exc:
            error = InternalError(f"MAPPER_END not sent: {type(exc).__name__}: {exc}")
            for waiter in batch:
                waiter.finish(error)
            raise
        finally:
            with self._lock:
                if self._pending:
                    self._pending[0].lead()
                else:
                    self._busy = False
        for waiter, outcome in zip(batch, outcomes, strict=True):
            waiter.finish(outcome)

    def _take(self) -> list[_Waiter]:
        """The first queued end and the next ones of its shuffle, within the caps (lock held)."""
        first = self._pending[0].command
        key = (first.app_id, first.shuffle_id)
        batch: list[_Waiter] = []
        rest: list[_Waiter] = []
        size = 0
        for waiter in self._pending:
            cmd = waiter.command
            cost = len(cmd.partitions) + _ENTRY_BYTES
            fits = not batch or (len(batch) < self._max_ends and size + cost <= self._max_bytes)
            if fits and (cmd.app_id, cmd.shuffle_id) == key:
                batch.append(waiter)
                size += cost
            else:
                rest.append(waiter)
        self._pending = rest
        return batch

    def _send(self, batch: list[_Waiter]) -> list[MapperEndReply | CroupierError]:
        self.requests += 1
        if len(batch) == 1:
            command = batch[0].command
            return [decode_reply(MapperEndReply, self._call(command), "MapperEnd")]
        first = batch[0].command
        ends = tuple(
            (w.command.map_id, w.command.attempt_id, w.command.touched, w.command.partitions) for w in batch
        )
        try:
            body = self._call(MapperEndBatch(first.app_id, first.shuffle_id, ends))
        except BadRequest:
            # refused whole: a master that predates MAPPER_END_BATCH, or a malformed entry
            # (each caller then gets its own entry's answer)
            return [self._single(w.command) for w in batch]
        return mapper_end_results(body, len(batch))

    def _single(self, command: MapperEnd) -> MapperEndReply | CroupierError:
        try:
            return decode_reply(MapperEndReply, self._call(command), "MapperEnd")
        except CroupierError as exc:
            return exc
