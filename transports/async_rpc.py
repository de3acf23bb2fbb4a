"""``AsyncRpcClient``: many requests in flight to many servers, from one thread.

The data plane needs pipelining: a writer keeps a window of pushes in flight to
every worker, and a primary forwards pushes to replicas without blocking its push
server. One thread owns one DEALER socket per endpoint (a socket belongs to one
thread), sends what other threads queue with ``send``, matches replies by request
id, and runs each request's callback exactly once: with the reply, with the
server's error, or with ``RequestTimeout`` / ``Unavailable``.

Callbacks run on the client's thread and must not block.

Usage::

    client = AsyncRpcClient(timeout=30)
    client.start()
    client.send("tcp://127.0.0.1:7001", MsgType.PUSH, body, payloads, callback)
    client.stop()   # pending callbacks get Unavailable
"""

from __future__ import annotations

import heapq
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from croupier.core.errors import (
    BadRequest,
    CroupierError,
    RequestTimeout,
    Unavailable,
    error_from_wire,
)
from croupier.core.wire import Kind
from croupier.transports._framing import Payload, parse_message
from croupier.transports._json import encode_body
from croupier.transports._loop import Mailbox, run_loop
from croupier.transports._zmqio import recv_frames, send_frames
from croupier.transports.auth import Signer, request_frames
from croupier.transports.curve import CurveClient, timeout_hint
from croupier.transports.rpc.client import Reply

__all__ = ["AsyncRpcClient", "Callback"]

log = logging.getLogger(__name__)

Callback = Callable[[Reply | None, CroupierError | None], None]
_U64 = (1 << 64) - 1
_Context = zmq.Context[zmq.Socket[bytes]]
_Socket = zmq.Socket[bytes]
_ANSWERED_MAX = 100_000  # peers remembered as having answered (bounded: a long-lived client meets many)


@dataclass(slots=True)
class _Pending:
    url: str
    msg_type: int
    callback: Callback
    deadline: float


@dataclass(slots=True)
class _Peer:
    sock: _Socket
    pending: set[int] = field(default_factory=set)
    used: float = field(default_factory=time.monotonic)  # the last send or reply


class AsyncRpcClient:
    """A pipelined DEALER client for many endpoints.

    State (owned by the client thread):
        peers: endpoint -> DEALER socket and its in-flight request ids.
        pending: request id -> callback and deadline.

    Parameters:
        context: a shared ZeroMQ context (default: the process-wide instance).
        timeout: default per-request deadline, seconds.
        name: the thread's name.
        curve: connect as a CURVE client of this server key (a fresh key pair per socket).
        signer: signs each request as it is queued (PROTOCOL §2.1); None sends unsigned.
        idle_close: seconds a peer may have nothing in flight before its socket is closed
            (the next request reconnects). An open socket redials a dead peer's port for
            ever: a master whose worker died would keep dialling whatever binds it next.
    """

    def __init__(
        self,
        *,
        context: _Context | None = None,
        timeout: float = 30.0,
        name: str = "async-rpc",
        curve: CurveClient | None = None,
        signer: Signer | None = None,
        idle_close: float = 30.0,
    ) -> None:
        if not idle_close > 0:
            raise ValueError(f"idle_close must be positive, not {idle_close!r}")
        self._idle_close = idle_close
        self._idle_checked = time.monotonic()
        self.peers_closed_idle = 0
        self._curve = curve
        self._answered: set[str] = set()  # peers that replied: CURVE is not why one is late
        self.signer = signer
        self._context = context or zmq.Context.instance()
        self._timeout = timeout
        self._name = name
        # requests queued by other threads, for the client thread to send
        self._outbox: Mailbox[tuple[str, int, int, list[Payload | zmq.Frame], Callback, float]] = Mailbox()
        # a random start: two clients of one app never sign the same request in the same
        # microsecond with the same id (the server would refuse the second as a replay)
        self._ids = itertools.count(secrets.randbits(62) + 1)
        self._outbox.open()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopping = False
        self._peers: dict[str, _Peer] = {}
        self._pending: dict[int, _Pending] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._started = False
        self._closed = False
        self.sent = 0

    def start(self) -> None:
        self._started = True
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; every pending request's callback gets ``Unavailable``. Idempotent."""
        if self._closed:
            return
        self._stopping = True
        self._outbox.wake()
        if self._started:
            self._thread.join()
        else:
            self._fail_all(Unavailable("the client was never started"))
        self._outbox.close()
        self._closed = True

    def send(
        self,
        url: str,
        msg_type: int,
        body: dict[str, Any],
        payloads: Sequence[Payload],
        callback: Callback,
        *,
        timeout: float | None = None,
        forward: Sequence[zmq.Frame] = (),
    ) -> None:
        """Queue one request (any thread). Payloads must not change until the callback runs.

        ``forward``: received frames sent after ``payloads`` as they are (libzmq's buffer by
        reference: no copy, nothing for pyzmq's garbage collector); not covered by a signature
        (only the first payload is, PROTOCOL §2.1)."""
        if self._stopping:
            callback(None, Unavailable("the client is stopping"))
            return
        request_id = next(self._ids) & _U64 or 1
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        frames: list[Payload | zmq.Frame] = [
            *request_frames(self.signer, msg_type, request_id, body, encode_body(body), payloads),
            *forward,
        ]
        self._outbox.put((url, msg_type, request_id, frames, callback, deadline))

    def in_flight(self) -> int:
        return len(self._pending)

    # -- the client thread -----------------------------------------------------------------
    def _peer(self, url: str) -> _Peer:
        """The peer for ``url``, connected on first use.

        Raises:
            Unavailable: ZeroMQ refused the endpoint.
            BadRequest: the URL cannot even be encoded (a lone surrogate, say).
        """
        peer = self._peers.get(url)
        if peer is None:
            sock = self._context.socket(zmq.DEALER)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, 100_000)
                sock.setsockopt(zmq.RCVHWM, 100_000)
                if self._curve is not None:
                    self._curve.apply(sock)
                sock.connect(url)
            except zmq.ZMQError as exc:
                sock.close(linger=0)
                raise Unavailable(f"cannot connect to {url!r}: {exc}") from exc
            except Exception as exc:
                # pyzmq encodes the endpoint first: a URL that is not encodable is the
                # caller's bad input, and the socket must not outlive it
                sock.close(linger=0)
                raise BadRequest(f"cannot connect to {url!r}: {exc}") from exc
            peer = self._peers[url] = _Peer(sock)
            self._poller.register(sock, zmq.POLLIN)
        return peer

    def _drop_peer(self, url: str, error: CroupierError) -> None:
        """Forget a peer's socket (a lazy-pirate reset) and fail what was in flight on it."""
        peer = self._peers.pop(url, None)
        if peer is None:
            return
        self._poller.unregister(peer.sock)
        peer.sock.close(linger=0)
        for rid in list(peer.pending):
            self._finish(rid, None, error)

    def _finish(self, request_id: int, reply: Reply | None, error: CroupierError | None) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return  # a late reply to a request that already timed out
        peer = self._peers.get(pending.url)
        if peer is not None:
            peer.pending.discard(request_id)
        try:
            pending.callback(reply, error)
        except Exception:
            log.exception("callback of request %d to %s failed", request_id, pending.url)

    def _fail_all(self, error: CroupierError) -> None:
        for url, _, _, _, callback, _ in self._outbox.drain():
            try:
                callback(None, error)
            except Exception:
                log.exception("callback for %s failed", url)
        for rid in list(self._pending):
            self._finish(rid, None, error)

    def _run(self) -> None:
        self._poller = zmq.Poller()
        self._poller.register(self._outbox.fd, zmq.POLLIN)
        try:
            run_loop(self._name, "client", lambda: self._stopping, self._turn, log)
        finally:
            self._fail_all(Unavailable("the client stopped"))
            for url in list(self._peers):
                self._drop_peer(url, Unavailable("the client stopped"))

    def _turn(self) -> None:
        """One wake-up: send what was queued, read what arrived, expire what is late."""
        timeout_ms = 1000
        if self._deadlines:
            timeout_ms = max(0, min(1000, int((self._deadlines[0][0] - time.monotonic()) * 1000) + 1))
        events = dict(self._poller.poll(timeout_ms))
        self._outbox.clear(self._outbox.fd in events)  # before the drain: a later send wakes us again
        self._send_queued()
        for url, peer in list(self._peers.items()):
            if peer.sock in events:
                self._receive(url, peer)
        self._expire()
        self._close_idle()

    def _close_idle(self) -> None:
        """Close the sockets of peers with nothing in flight for ``idle_close`` (once a second)."""
        now = time.monotonic()
        if now - self._idle_checked < 1.0:
            return
        self._idle_checked = now
        idle = [url for url, p in self._peers.items() if not p.pending and now - p.used >= self._idle_close]
        for url in idle:
            self._drop_peer(url, Unavailable(f"connection to {url} closed when idle"))
        self.peers_closed_idle += len(idle)

    def _send_queued(self) -> None:
        for url, msg_type, rid, frames, callback, deadline in self._outbox.drain():
            try:
                peer = self._peer(url)
            except CroupierError as exc:
                try:
                    callback(None, exc)
                except Exception:
                    log.exception("callback for %r failed", url)
                continue
            self._pending[rid] = _Pending(url, msg_type, callback, deadline)
            peer.pending.add(rid)
            peer.used = time.monotonic()
            heapq.heappush(self._deadlines, (deadline, rid))
            try:
                send_frames(peer.sock, frames)
                self.sent += 1
            except zmq.Again:
                self._finish(rid, None, Unavailable(f"{url} has too many queued requests"))
            except zmq.ZMQError as exc:
                self._finish(rid, None, Unavailable(f"send to {url} failed: {exc}"))
            except Exception as exc:
                # a frame pyzmq cannot send (not a buffer): the sender's bug, this request only
                log.exception("%s: request %d to %r could not be sent", self._name, rid, url)
                self._finish(rid, None, BadRequest(f"request to {url!r} could not be sent: {exc}"))

    def _receive(self, url: str, peer: _Peer) -> None:
        for _ in range(1000):
            try:
                frames = recv_frames(peer.sock)
            except zmq.Again:
                return
            views = [f.buffer for f in frames]
            try:
                msg = parse_message(views, Kind.REPLY)
            except BadRequest as exc:
                log.warning("malformed reply from %s dropped: %s", url, exc)
                continue
            rid = msg.header.request_id
            peer.used = time.monotonic()
            if url not in self._answered and len(self._answered) < _ANSWERED_MAX:
                self._answered.add(url)
            if msg.header.status:
                self._finish(rid, None, error_from_wire(msg.header.status, msg.body))
            else:
                self._finish(rid, Reply(msg.body, msg.payloads), None)

    def _expire(self) -> None:
        now = time.monotonic()
        reset: set[str] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, rid = heapq.heappop(self._deadlines)
            pending = self._pending.get(rid)
            if pending is None:
                continue
            reset.add(pending.url)
            self._finish(
                rid,
                None,
                RequestTimeout(
                    f"no reply from {pending.url} to message type {pending.msg_type} in time"
                    f"{timeout_hint(self._curve, pending.url in self._answered)}",
                    {"url": pending.url, "msg_type": pending.msg_type},
                ),
            )
        for url in reset:
            # the peer may be dead or restarted: drop queued requests rather than deliver them late
            self._drop_peer(url, RequestTimeout(f"connection to {url} reset after a timeout", {"url": url}))
