"""Typed, validated identifiers.

Ids end up in file paths (DESIGN §10) and ZooKeeper paths, so they are checked
before they are used: 1..128 characters from ``[A-Za-z0-9._-]``, not ``.`` or
``..``. Numeric ids (shuffle, partition, map, attempt, epoch) are bounded
non-negative integers.
"""

from __future__ import annotations

import re
from typing import NewType

from croupier.core.errors import BadRequest

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_INT_ID",
    "MAX_TEXT_BYTES",
    "AppId",
    "WorkerId",
    "app_id",
    "int_id",
    "text",
    "worker_id",
]

AppId = NewType("AppId", str)
WorkerId = NewType("WorkerId", str)

MAX_ID_LENGTH = 128
# Free text that reaches the event log (a ``reason``): bounded so that one request
# cannot grow the log by more than this (issue 13: one reason grew it by 0.9 MiB).
MAX_TEXT_BYTES = 1024
MAX_INT_ID = 2**31 - 1
_ID_RE = re.compile(r"[A-Za-z0-9._-]+")


def _check_name(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise BadRequest(f"{kind} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise BadRequest(f"{kind} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if value in (".", "..") or not _ID_RE.fullmatch(value):
        raise BadRequest(f"{kind} {value!r} may only hold letters, digits, '.', '_' and '-'")
    return value


def app_id(value: object) -> AppId:
    """Validate an application id."""
    return AppId(_check_name("app_id", value))


def worker_id(value: object) -> WorkerId:
    """Validate a worker id."""
    return WorkerId(_check_name("worker_id", value))


def int_id(kind: str, value: object, upper: int = MAX_INT_ID) -> int:
    """Validate a non-negative integer id (shuffle, partition, map, attempt, epoch)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{kind} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= upper:
        raise BadRequest(f"{kind} {value} is out of range 0..{upper}")
    return value


def text(kind: str, value: object, limit: int = MAX_TEXT_BYTES) -> str:
    """Validate free text (a ``reason``): a string of at most ``limit`` bytes in UTF-8.

    Raises:
        BadRequest: not a string, too long, or not encodable (a lone surrogate).
    """
    if not isinstance(value, str):
        raise BadRequest(f"{kind} must be a string, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{kind} is not valid Unicode: {exc.reason}") from exc
    if size > limit:
        raise BadRequest(f"{kind} is {size} bytes long in UTF-8; the limit is {limit}")
    return value
