"""Request/reply RPC over ZeroMQ: a ROUTER server (``server``) and a DEALER client (``client``).

Framing (the byte layout of the header is in :mod:`croupier.core.wire`)::

    request  (client DEALER -> server ROUTER)
        frame 0   header, 20 bytes: magic "CRPR", version 1, kind 0 = REQUEST,
                  msg_type u16, request_id u64 (client-chosen, never 0), status 0, flags 0
        frame 1   body: a UTF-8 JSON object (``{}`` when there is nothing to say)
        (frame 2  the 48-byte auth frame, when the header's flags bit 0 is set:
                  ``croupier.transports.auth``, PROTOCOL §2.1; payloads then start at frame 3)
        frame 2.. payloads: raw bytes, any number, any size up to the server's limit

    reply    (server ROUTER -> client DEALER)
        frame 0   header: kind 1 = REPLY, the request's msg_type and request_id,
                  status 0 = OK, else the error's status (see core/errors.py)
        frame 1   body: on OK the handler's JSON object; on error
                  ``{"code": str, "message": str, "details": object}``
        frame 2.. payloads (OK replies only)

There is no empty delimiter frame (this is not REQ/REP): the ROUTER identity frame
is added and stripped by ZeroMQ itself and never reaches the application.

Malformed requests (fewer than 2 frames, a header of the wrong size, magic,
version or kind, a body that is not a JSON object, a msg_type the server does not
serve) get a ``BAD_REQUEST`` reply. Its header echoes msg_type and request_id when
the header frame has the right size and magic, and carries ``0, 0`` otherwise; a
client therefore never uses request id 0. A frame larger than the server's
``max_message_bytes`` makes libzmq drop the connection (ZMQ_MAXMSGSIZE) instead:
no reply is possible then, and the client's DEALER reconnects on its own.

A server given a ``Verifier`` checks every request's signature and its message type's
access level before dispatch, and answers ``UNAUTHORIZED`` (logged, rate-limited) for
those it refuses; a server without one accepts every request.

Replies are matched by request_id. A client retries a timed-out request with a
*new* request id on a *new* socket (the zguide "lazy pirate"), so only idempotent
requests should be sent with ``retries > 0``.

The server and :mod:`croupier.transports.async_rpc` share one socket loop and one cross-thread
hand-off (:mod:`croupier.transports._loop`).
"""

from croupier.transports.rpc.client import Reply, RpcClient
from croupier.transports.rpc.server import Handler, Request, Responder, RpcServer, RpcServerStats

__all__ = [
    "Handler",
    "Reply",
    "Request",
    "Responder",
    "RpcClient",
    "RpcServer",
    "RpcServerStats",
]
