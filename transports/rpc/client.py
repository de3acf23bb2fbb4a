"""``RpcClient``: a DEALER client for one server endpoint, one request at a time.

The framing is in :mod:`croupier.transports.rpc`; many requests in flight at once is
:mod:`croupier.transports.async_rpc`.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import zmq

from croupier.core.errors import BadRequest, InternalError, RequestTimeout, Unavailable, error_from_wire
from croupier.core.wire import Header, Kind
from croupier.transports._framing import Payload, type_name
from croupier.transports._json import decode_body, encode_body
from croupier.transports.auth import Signer, request_frames
from croupier.transports.curve import CurveClient, timeout_hint

__all__ = ["Reply", "RpcClient"]

logger = logging.getLogger(__name__)

# Bounded queues: with SNDHWM/RCVHWM counted in messages, memory is bounded by
# HWM x message size; 1000 is libzmq's default and plenty for request/reply.
_HWM = 1000
_U64 = (1 << 64) - 1

_Context = zmq.Context[zmq.Socket[bytes]]
_Socket = zmq.Socket[bytes]


@dataclass(frozen=True)
class Reply:
    """A successful reply: the JSON body and zero-copy views of the payload frames."""

    body: dict[str, Any]
    payloads: list[memoryview]


class RpcClient:
    """A DEALER client for one server endpoint. Thread-safe: calls are serialised by a lock.

    State:
        one DEALER socket, recreated after every timeout (zguide "lazy pirate");
        a request id counter (u64, starts at 1; 0 is what a server uses when it
        could not read the id).

    Parameters:
        url: the server's endpoint.
        context: defaults to the process-wide ``zmq.Context.instance()``; the
            client never terminates a context.
        timeout: seconds to wait for each try.
        retries: extra tries after a timeout. A retry is a new request (new id,
            new socket): only retry idempotent requests, pass ``retries=0`` otherwise.
        retry_backoff: sleep before retry n is ``retry_backoff * 2 ** (n - 1)``.
        curve: connect as a CURVE client of this server key (a fresh key pair per socket).
        signer: signs each try (a new nonce each time, PROTOCOL §2.1); None sends unsigned.

    Raises:
        ValueError: a non-positive timeout or negative retries.
        Unavailable: the endpoint is invalid.
    """

    def __init__(
        self,
        url: str,
        *,
        context: _Context | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        retry_backoff: float = 0.1,
        curve: CurveClient | None = None,
        signer: Signer | None = None,
    ) -> None:
        _check_policy(timeout, retries)
        self.url = url
        self._curve = curve
        self._answered = False  # a reply came: the handshake works (CURVE is not why one is late)
        self.signer = signer
        self._context: _Context = context if context is not None else zmq.Context.instance()
        self._timeout = timeout
        self._retries = retries
        self._retry_backoff = retry_backoff
        self._lock = threading.Lock()
        # a random start: two clients of one app never sign the same request in the same
        # microsecond with the same id (the server would refuse the second as a replay)
        self._ids = itertools.count(secrets.randbits(62) + 1)
        self._closed = False
        self._sock: _Socket | None = self._connect()

    def _connect(self) -> _Socket:
        sock: _Socket = self._context.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, _HWM)
            sock.setsockopt(zmq.RCVHWM, _HWM)
            if self._curve is not None:
                self._curve.apply(sock)
            sock.connect(self.url)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            raise Unavailable(f"cannot connect to {self.url}: {exc}") from exc
        return sock

    def _next_id(self) -> int:
        # u64 on the wire; skip 0 after a (theoretical) wrap, it means "unknown".
        return (next(self._ids) & _U64) or 1

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def call(
        self,
        msg_type: int,
        body: dict[str, Any] | None = None,
        payloads: Sequence[Payload] = (),
        *,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Reply:
        """Send one request and wait for its reply.

        Parameters:
            msg_type: a :class:`~croupier.core.wire.MsgType` value.
            body: a JSON object; None sends ``{}``.
            payloads: raw frames; 64 KiB and larger are sent zero-copy, so do not
                mutate them until the call returns.
            timeout, retries: override the client's defaults for this call.

        Raises:
            CroupierError: the server's error reply, rebuilt (never retried here;
                callers decide by ``.retriable``).
            RequestTimeout: no reply after all tries.
            Unavailable: the client is closed, or ZeroMQ failed.
            InternalError: the server sent a malformed reply body.
            TypeError, ValueError: ``body`` is not JSON-encodable.
        """
        timeout = self._timeout if timeout is None else timeout
        retries = self._retries if retries is None else retries
        _check_policy(timeout, retries)
        body = body if body is not None else {}
        data = encode_body(body)
        with self._lock:
            if self._closed:
                raise Unavailable(f"client for {self.url} is closed")
            for attempt in range(retries + 1):
                if attempt:
                    time.sleep(self._retry_backoff * 2 ** (attempt - 1))
                reply = self._try_once(msg_type, body, data, payloads, timeout)
                if reply is not None:
                    self._answered = True
                    return reply
                # Lazy pirate: a socket that timed out may hold a half-dead
                # connection or a queue of stale requests; start afresh.
                self._drop_socket()
                logger.debug("%s to %s: try %d timed out", type_name(msg_type), self.url, attempt + 1)
            raise RequestTimeout(
                f"no reply from {self.url} to {type_name(msg_type)} within {timeout:g} s "
                f"({retries + 1} tries){timeout_hint(self._curve, self._answered)}",
                {"url": self.url, "msg_type": msg_type, "timeout": timeout, "tries": retries + 1},
            )

    def _try_once(
        self, msg_type: int, body: dict[str, Any], data: bytes, payloads: Sequence[Payload], timeout: float
    ) -> Reply | None:
        """One request on the (re)connected socket, with a fresh id; None when it timed out.

        The caller holds ``self._lock``. A ZeroMQ failure drops the socket and raises
        ``Unavailable``.
        """
        request_id = self._next_id()
        try:
            if self._sock is None:
                self._sock = self._connect()
            return self._exchange(
                self._sock,
                msg_type=msg_type,
                request_id=request_id,
                body=body,
                data=data,
                payloads=payloads,
                timeout=timeout,
            )
        except zmq.ZMQError as exc:
            self._drop_socket()
            raise Unavailable(f"{type_name(msg_type)} to {self.url} failed: {exc}") from exc

    def _exchange(
        self,
        sock: _Socket,
        *,
        msg_type: int,
        request_id: int,
        body: dict[str, Any],
        data: bytes,
        payloads: Sequence[Payload],
        timeout: float,
    ) -> Reply | None:
        """One try: send, then read until our reply or the deadline. None on timeout."""
        deadline = time.monotonic() + timeout
        frames = request_frames(self.signer, msg_type, request_id, body, data, payloads)
        # Sending blocks only at the HWM; bound it by the same timeout.
        sock.setsockopt(zmq.SNDTIMEO, max(1, math.ceil(timeout * 1000)))
        try:
            sock.send_multipart(frames, copy=False)
        except zmq.Again:
            return None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not sock.poll(max(1, math.ceil(remaining * 1000)), zmq.POLLIN):
                continue
            views = [f.buffer for f in sock.recv_multipart(copy=False)]
            try:
                got = Header.decode(views[0])
            except BadRequest as exc:
                logger.warning("malformed reply header from %s discarded: %s", self.url, exc)
                continue
            if got.kind != Kind.REPLY or got.request_id != request_id:
                # A late reply to an earlier call that timed out.
                logger.debug(
                    "reply %d from %s discarded (waiting for %d)", got.request_id, self.url, request_id
                )
                continue
            got_body: dict[str, Any] | None
            try:
                got_body = decode_body(views[1]) if len(views) > 1 else None
            except BadRequest:
                got_body = None
            if got.status != 0:
                raise error_from_wire(got.status, got_body)
            if got_body is None:
                raise InternalError(f"malformed reply from {self.url} to {type_name(msg_type)}")
            return Reply(got_body, views[2:])

    def close(self) -> None:
        """Close the socket (linger 0). Idempotent; waits for a call in progress."""
        with self._lock:
            self._closed = True
            self._drop_socket()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _check_policy(timeout: float, retries: int) -> None:
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
