"""``--log-format json``: one JSON object per log line, for log shippers.

Fields: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``msg``, ``thread``, ``exc`` (a
traceback, when there is one), and ``worker_id``, ``app_id``, ``shuffle_id`` when known,
from the first of: ``extra=`` given to the log call; the request being handled on the
logging thread (``croupier.transports.log_context``: the RPC server sets them from each
request's body, the master actor from each command); the whole process, set by
``JsonFormatter(fields)`` (``croupier worker`` sets its ``worker_id``).

The request's fields are read when the record is formatted: on the logging thread with the
usual handlers (a ``QueueHandler`` would format elsewhere and miss them).

``held_logs()``: a command whose first stdout line is its URL (``croupier master``,
``croupier worker``) holds the log records of its start-up until that line is out, so that
stdout and stderr captured together (``2>&1``) still begin with it (PROTOCOL/README).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from croupier.transports.log_context import LOG_FIELDS

__all__ = ["FIELDS", "JsonFormatter", "held_logs"]

FIELDS = ("worker_id", "app_id", "shuffle_id")


class JsonFormatter(logging.Formatter):
    """Parameters:
    fields: values of ``FIELDS`` for every record of this process (a record's own and the
        request's win).
    """

    def __init__(self, fields: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "thread": record.threadName,
        }
        context = LOG_FIELDS.get() or {}
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is None:
                value = context.get(name, self.fields.get(name))
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _Holder(logging.Handler):
    """Keeps records (up to ``limit``, then passes them on) until ``let_go``, which hands the
    kept ones to ``targets`` in order; from then on every record goes straight to them."""

    def __init__(self, targets: list[logging.Handler], limit: int, max_hold: float) -> None:
        super().__init__()
        self._targets = targets
        self._limit = limit
        self._until = time.monotonic() + max_hold
        self._held: list[logging.LogRecord] = []
        self._released = False
        self._gate = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._gate:
            if not self._released and len(self._held) < self._limit and time.monotonic() < self._until:
                context = LOG_FIELDS.get() or {}
                for name in FIELDS:  # the request's fields, read later on another thread
                    if getattr(record, name, None) is None and context.get(name) is not None:
                        setattr(record, name, context[name])
                self._held.append(record)
                return
        # too many, or held too long (a start-up that waits: its warnings must be seen)
        self.let_go()
        self._forward(record)

    def _forward(self, record: logging.LogRecord) -> None:
        for target in self._targets:
            if record.levelno >= target.level:
                target.handle(record)

    def let_go(self) -> None:  # not ``release``: that is the handler's lock
        with self._gate:
            if self._released:
                return
            self._released = True
            held, self._held = self._held, []
            for record in held:
                self._forward(record)


@contextlib.contextmanager
def held_logs(limit: int = 10_000, max_hold: float = 10.0) -> Iterator[Callable[[], None]]:
    """Hold the root logger's records until the returned ``release`` is called (or the block
    ends, an error included), then write them, in order, to the handlers they were bound for.

    At most ``limit`` records, for at most ``max_hold`` seconds: the first record past either
    lets every held one go (a start-up that waits on something keeps logging why).
    """
    root = logging.getLogger()
    targets = list(root.handlers)
    holder = _Holder(targets, limit, max_hold)
    for target in targets:
        root.removeHandler(target)
    root.addHandler(holder)

    def release() -> None:
        holder.let_go()  # first: records logged meanwhile go straight through the holder
        if holder in root.handlers:
            root.removeHandler(holder)
            for target in targets:
                root.addHandler(target)

    try:
        yield release
    finally:
        release()
