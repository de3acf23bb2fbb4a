"""``--log-format json``: one JSON object per log line, for log shippers.

Fields: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``msg``, ``thread``, ``exc`` (a
traceback, when there is one), and ``worker_id``, ``app_id``, ``shuffle_id`` when known,
from the first of: ``extra=`` given to the log call; the request being handled on the
logging thread (``croupier.transports.log_context``: the RPC server sets them from each
request's body, the master actor from each command); the whole process, set by
``JsonFormatter(fields)`` (``croupier worker`` sets its ``worker_id``).

The request's fields are read when the record is formatted: on the logging thread with the
usual handlers (a ``QueueHandler`` would format elsewhere and miss them).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from croupier.transports.log_context import LOG_FIELDS

__all__ = ["FIELDS", "JsonFormatter"]

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
