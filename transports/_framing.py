"""Frame-level helpers shared by the RPC server and client (and later pipelines).

The byte layout lives in :mod:`croupier.core.wire`; this module only turns a
list of ZeroMQ frames into checked parts, and back. No sockets here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from croupier.core.errors import BadRequest, CroupierError, InternalError
from croupier.core.wire import HEADER_SIZE, MAGIC, Header, Kind, MsgType, encode_header
from croupier.transports._json import decode_body, encode_body

__all__ = [
    "COPY_THRESHOLD",
    "Frames",
    "ParsedMessage",
    "Payload",
    "encode_error_body",
    "parse_message",
    "peek_ids",
    "reply_frames",
    "type_name",
]

# pyzmq copies frames under 64 KiB even with copy=False; above it, zero-copy
# hands the buffer to libzmq, which is what DESIGN §9 asks for payloads.
COPY_THRESHOLD = 64 * 1024

Payload = bytes | memoryview
Frames = list[Payload]

# msg_type (u16) at offset 6 and request_id (u64) at offset 8, see core/wire.py.
_IDS = struct.Struct("<HQ")
# Header flags bit 0: frame 2 is the auth frame (PROTOCOL §2.1, transports/auth.py).
_AUTH_FLAG = 1


class ParsedMessage(NamedTuple):
    """A checked message: header, JSON body, the auth frame (header flag bit 0) and raw payload
    views (a named tuple, as ``Header``: one per message)."""

    header: Header
    body: dict[str, Any]
    payloads: list[memoryview]
    auth: memoryview | None = None


def peek_ids(frame: Payload) -> tuple[int, int]:
    """Best-effort ``(msg_type, request_id)`` of a header that failed to parse.

    Only trusted when the frame has the right size and magic (a wrong version or
    kind still lets the sender match the BAD_REQUEST reply); otherwise ``(0, 0)``.
    """
    if len(frame) != HEADER_SIZE or bytes(frame[:4]) != MAGIC:
        return 0, 0
    msg_type, request_id = _IDS.unpack_from(frame, 6)
    return int(msg_type), int(request_id)


def parse_message(frames: Sequence[memoryview], expect: Kind) -> ParsedMessage:
    """Check ``[header, body, *payloads]`` (the ROUTER identity already removed).

    Parameters:
        frames: zero-copy views of the received frames.
        expect: the kind the receiver accepts (servers take REQUEST, clients REPLY).

    With the header's AUTH flag (bit 0) on a request, frame 2 is the auth frame and
    payloads start at frame 3 (an empty auth frame when there is none: the verifier
    refuses it); a server without a secret ignores it. Replies never carry an auth frame:
    their flags are ignored and their payloads start at frame 2.

    Raises:
        BadRequest: fewer than 2 frames, bad header, wrong kind, a request with a status or a
            flag bit other than AUTH, body not a JSON object.
    """
    if len(frames) < 2:
        raise BadRequest(f"a message needs at least 2 frames (header, body), got {len(frames)}")
    header = Header.decode(frames[0])
    if header.kind != expect:
        raise BadRequest(f"expected a {expect.name} header, got {header.kind.name}")
    if expect is Kind.REQUEST:
        if header.flags & ~_AUTH_FLAG:
            raise BadRequest(f"unknown header flags 0x{header.flags:04x}: a request sets only bit 0 (AUTH)")
        if header.status:
            raise BadRequest(f"a request's status must be 0, got {header.status}")
    body = decode_body(frames[1])
    if header.flags & _AUTH_FLAG and expect is Kind.REQUEST:
        if len(frames) < 3:
            # A missing credential, not a malformed message: the verifier refuses the empty
            # frame with UNAUTHORIZED ("malformed auth frame"); a server without a secret
            # ignores it, as it ignores every auth frame.
            return ParsedMessage(header, body, [], memoryview(b""))
        return ParsedMessage(header, body, list(frames[3:]), frames[2])
    return ParsedMessage(header, body, list(frames[2:]))


def encode_error_body(exc: CroupierError) -> tuple[int, bytes]:
    """``(status, body bytes)`` of an error reply.

    Falls back to a plain InternalError when ``exc.details`` is not JSON-encodable,
    so that a bad error object can never leave a request unanswered.
    """
    try:
        return exc.status, encode_body(exc.to_wire())
    except (TypeError, ValueError):
        fallback = InternalError(f"{exc.code}: {exc.message} (details were not JSON-encodable)")
        return fallback.status, encode_body(fallback.to_wire())


def reply_frames(
    msg_type: int, request_id: int, status: int, body: bytes, payloads: Sequence[Payload] = ()
) -> Frames:
    """Frames of a reply: ``[header, body, *payloads]``."""
    return [encode_header(Kind.REPLY, msg_type, request_id, status), body, *payloads]


def type_name(msg_type: int) -> str:
    """``PUSH(3)`` for a known message type, the bare number for another (for logs and errors)."""
    try:
        return f"{MsgType(msg_type).name}({msg_type})"
    except ValueError:
        return str(msg_type)
