"""Log fields of the request being handled: ``app_id`` and ``shuffle_id``.

A ``ContextVar`` holds them for the current thread (and task); the JSON log formatter
(``croupier.ops.logs``) puts them on every line logged meanwhile. The RPC server sets them
from each request's body, the master actor from each command; paths on other threads (the
partition actors, the flushers, the commit coordinator's callbacks) pass ``extra=`` instead,
with ``key_fields``.

Usage::

    with log_fields(app_id="app-1", shuffle_id=3):
        log.warning("...")  # carries app_id and shuffle_id

    log.error("location %s failed", key.name, extra=key_fields(key))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar, Token
from typing import Any, Protocol

__all__ = [
    "LOG_FIELDS",
    "MAX_APP_ID_CHARS",
    "body_fields",
    "enter",
    "id_fields",
    "key_fields",
    "lazy_ids",
    "log_fields",
    "object_fields",
]

MAX_APP_ID_CHARS = 128
"""A longer ``app_id`` is cut to this many characters (plus ``...``) in the log field."""

_MIN_ID = -(2**63)
_MAX_ID = 2**63 - 1

LOG_FIELDS: ContextVar[Mapping[str, Any] | None] = ContextVar("croupier_log_fields", default=None)
"""The fields of the request being handled, or None."""


class _Keyed(Protocol):
    @property
    def app_id(self) -> str: ...

    @property
    def shuffle_id(self) -> int | None: ...


def enter(values: Mapping[str, Any]) -> Token[Mapping[str, Any] | None]:
    """Set ``values`` (over the outer ones); give the token to ``LOG_FIELDS.reset``."""
    outer = LOG_FIELDS.get()
    return LOG_FIELDS.set({**outer, **values} if outer else values)


@contextlib.contextmanager
def log_fields(**kwargs: Any) -> Iterator[None]:
    """Within the block, log lines carry ``kwargs`` (merged over the outer ones; None values
    are left out)."""
    token = enter({k: v for k, v in kwargs.items() if v is not None})
    try:
        yield
    finally:
        LOG_FIELDS.reset(token)


def body_fields(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The log fields of a request body (a client's), or None: see ``id_fields``."""
    app_id = body.get("app_id")
    shuffle_id = body.get("shuffle_id")
    if app_id is None and shuffle_id is None:
        return None
    return id_fields(app_id, shuffle_id) or None


def id_fields(app_id: object, shuffle_id: object) -> dict[str, Any]:
    """The log fields of an app and a shuffle id from anywhere (a client may send anything):
    only a ``str`` app id, cut to ``MAX_APP_ID_CHARS``, and an ``int`` shuffle id in the int64
    range; the others are left out."""
    out: dict[str, Any] = {}
    if type(app_id) is str:
        out["app_id"] = app_id if len(app_id) <= MAX_APP_ID_CHARS else app_id[:MAX_APP_ID_CHARS] + "..."
    if type(shuffle_id) is int and _MIN_ID <= shuffle_id <= _MAX_ID:
        out["shuffle_id"] = shuffle_id
    return out


class _LazyIds(Mapping[str, Any]):
    """``id_fields(app_id, shuffle_id)``, worked out only when a line is logged (most
    requests log nothing: the master handles tens of thousands per second)."""

    __slots__ = ("_fields", "_raw")

    def __init__(self, app_id: object, shuffle_id: object) -> None:
        self._raw = (app_id, shuffle_id)
        self._fields: dict[str, Any] | None = None

    def _get(self) -> dict[str, Any]:
        if self._fields is None:
            self._fields = id_fields(*self._raw)
        return self._fields

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def lazy_ids(app_id: object, shuffle_id: object) -> Mapping[str, Any]:
    """The log fields ``id_fields(app_id, shuffle_id)`` as a mapping that works them out on
    first use: for ``enter`` on a hot path."""
    return _LazyIds(app_id, shuffle_id)


def object_fields(obj: object) -> dict[str, Any]:
    """The log fields of an object's ``app_id`` and ``shuffle_id`` attributes (a command's)."""
    return id_fields(getattr(obj, "app_id", None), getattr(obj, "shuffle_id", None))


def key_fields(key: _Keyed) -> dict[str, Any]:
    """``extra=`` for a log call about a location (or anything with an app and a shuffle id)."""
    return id_fields(key.app_id, key.shuffle_id)
