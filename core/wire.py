"""The fixed binary header frame that starts every Croupier message.

Layout (little-endian, 20 bytes; PROTOCOL.md is the byte-for-byte reference)::

    offset size field
    0      4    magic       b"CRPR"
    4      1    version     1
    5      1    kind        0 = request, 1 = reply
    6      2    msg_type    u16, see MsgType
    8      8    request_id  u64, chosen by the client, echoed in the reply
    16     2    status      u16, 0 = OK, else CroupierError.status (replies only)
    18     2    flags       u16, reserved, 0

Frame 2 is a UTF-8 JSON object (the body). Frames 3.. are raw payloads.
"""

from __future__ import annotations

import json
import struct
from enum import IntEnum
from typing import Any, NamedTuple

from croupier.core.batch import MAX_BATCH_BYTES
from croupier.core.errors import BadRequest

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "MAX_BODY_BYTES",
    "MAX_CONTROL_FRAME_BYTES",
    "MAX_DATA_FRAME_BYTES",
    "VERSION",
    "Header",
    "Kind",
    "MsgType",
    "decode_body",
    "encode_body",
    "encode_header",
]

MAGIC = b"CRPR"
VERSION = 1
_STRUCT = struct.Struct("<4sBBHQHH")
HEADER_SIZE = _STRUCT.size
MAX_BODY_BYTES = 16 * 1024 * 1024
# The largest frame a server accepts, per port (ZMQ_MAXMSGSIZE: libzmq drops the
# connection of a peer that sends a larger one, before any of it is buffered).
# Control requests (the master's port, a worker's control and fetch ports) are small
# JSON bodies: the largest legal one, GET_LOCATIONS_BATCH of 10,000 partitions, is
# about 110 KB.
MAX_CONTROL_FRAME_BYTES = 1024 * 1024
# PUSH and REPLICATE carry one batch per data frame, and a batch holds at most
# MAX_BATCH_BYTES; their header and body frames are far below it.
MAX_DATA_FRAME_BYTES = MAX_BATCH_BYTES


class Kind(IntEnum):
    REQUEST = 0
    REPLY = 1


class MsgType(IntEnum):
    """Message types. Numbers are part of the protocol: never renumber."""

    PING = 1
    # master control (JSON bodies, see core/commands.py)
    REGISTER_WORKER = 10
    WORKER_HEARTBEAT = 11
    LOSE_WORKER = 12
    EXCLUDE_WORKER = 13
    DECOMMISSION_WORKER = 14
    REGISTER_APP = 20
    APP_HEARTBEAT = 21
    UNREGISTER_APP = 22
    EXPIRE_APP = 23
    REGISTER_SHUFFLE = 30
    REVIVE_PARTITION = 31
    MAPPER_END = 32
    REPORT_COMMIT = 33
    GET_LOCATIONS = 34
    UNREGISTER_SHUFFLE = 35
    GET_SHUFFLE = 36
    GET_LOCATIONS_BATCH = 37
    RERUN_MAPS = 38
    GET_LOST_MAPS = 39
    STATUS = 40
    TAKE_OVER = 41
    REPORT_OFFLOAD = 42
    MAPPER_END_BATCH = 43
    # worker data plane (JSON body + raw payload frames, see core/dataplane.py)
    PUSH = 50
    REPLICATE = 51
    COMMIT_FILES = 52
    OPEN_STREAM = 53
    FETCH_CHUNK = 54
    DESTROY = 55
    WORKER_INFO = 56
    RESERVE = 57
    FETCH_SMALL = 58


_KINDS = {int(k): k for k in (Kind.REQUEST, Kind.REPLY)}  # a dict lookup: Kind(x) costs microseconds


class Header(NamedTuple):
    """One decoded header frame (a named tuple: immutable, and built in a third of a frozen
    dataclass's time, on every message)."""

    kind: Kind
    msg_type: int
    request_id: int
    status: int = 0
    flags: int = 0
    version: int = VERSION

    def encode(self) -> bytes:
        return _STRUCT.pack(
            MAGIC, self.version, int(self.kind), self.msg_type, self.request_id, self.status, self.flags
        )

    @classmethod
    def decode(cls, frame: bytes | memoryview) -> Header:
        """Parse a header frame.

        Raises:
            BadRequest: wrong size, wrong magic, unknown version or kind.
        """
        if len(frame) != HEADER_SIZE:
            raise BadRequest(f"header frame must be {HEADER_SIZE} bytes, got {len(frame)}")
        magic, version, kind, msg_type, request_id, status, flags = _STRUCT.unpack(frame)
        if magic != MAGIC:
            raise BadRequest(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise BadRequest(f"unsupported protocol version {version}, this server speaks {VERSION}")
        known = _KINDS.get(kind)
        if known is None:
            raise BadRequest(f"unknown message kind {kind}")
        return cls(known, msg_type, request_id, status, flags, version)


def encode_header(kind: Kind, msg_type: int, request_id: int, status: int = 0, flags: int = 0) -> bytes:
    """``Header(kind, msg_type, request_id, status, flags).encode()`` without the object (on
    every reply and request: a frozen dataclass costs a microsecond to build)."""
    return _STRUCT.pack(MAGIC, VERSION, int(kind), msg_type, request_id, status, flags)


def encode_body(body: dict[str, Any]) -> bytes:
    """Encode a JSON body compactly."""
    return _ENCODE(body).encode()


def decode_body(frame: bytes | memoryview) -> dict[str, Any]:
    """Decode a JSON body frame.

    Raises:
        BadRequest: not UTF-8, not JSON (``NaN`` and ``Infinity`` included), too large,
            or not a JSON object.
    """
    if len(frame) > MAX_BODY_BYTES:
        raise BadRequest(f"JSON body of {len(frame)} bytes exceeds {MAX_BODY_BYTES}")
    try:
        value = _DECODE(bytes(frame).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BadRequest(f"body must be a JSON object, got {type(value).__name__}")
    return value


def _no_constant(name: str) -> Any:
    """``NaN`` and ``Infinity`` are not JSON (Python's json reads them unless told not to)."""
    raise ValueError(f"{name} is not a JSON number")


# One encoder and one decoder, made once: ``json.dumps``/``json.loads`` with options build
# a new one per call, which costs more than encoding a small body. Both are stateless.
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_DECODE = json.JSONDecoder(parse_constant=_no_constant).decode
