"""The JSON of message bodies on the wire, with orjson (a C extension).

``croupier.core.wire`` has the same two functions on the standard library (``core`` is
stdlib only); the transports use these: a MAPPER_END's body and its reply cost about 0.2 µs
to encode and 1-4 µs to decode here, against 10-20 µs with ``json`` (BENCHMARKS.md, the
control scenario). What they accept and refuse is the same, but for two things: a float
that is not finite encodes as ``null`` (``json`` refused it), and non-ASCII text is sent as
UTF-8 rather than ``\\u`` escapes (both read back the same).
"""

from __future__ import annotations

from typing import Any

import orjson

from croupier.core.errors import BadRequest
from croupier.core.wire import MAX_BODY_BYTES

__all__ = ["decode_body", "encode_body", "encode_json"]

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int keys as strings, as ``json`` writes them


def encode_body(body: dict[str, Any]) -> bytes:
    """Encode a JSON body compactly (no spaces).

    Raises:
        TypeError: a value JSON cannot hold (an object, an int past 64 bits, a lone surrogate).
    """
    return orjson.dumps(body, option=_OPTIONS)


def encode_json(value: Any) -> bytes:
    """Any JSON value, compactly (an event's object for the log)."""
    return orjson.dumps(value, option=_OPTIONS)


def decode_body(frame: bytes | memoryview) -> dict[str, Any]:
    """Decode a JSON body frame.

    Raises:
        BadRequest: not UTF-8, not JSON (``NaN`` and ``Infinity`` included), nested more than
            1,024 deep, too large, or not a JSON object.
    """
    if len(frame) > MAX_BODY_BYTES:
        raise BadRequest(f"JSON body of {len(frame)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        value = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BadRequest(f"body must be a JSON object, got {type(value).__name__}")
    return value
