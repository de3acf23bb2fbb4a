"""Request/reply RPC over ZeroMQ: a ROUTER server and a DEALER client.

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
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, Self

import zmq

from croupier.core.access import Scheme
from croupier.core.errors import (
    BadRequest,
    CroupierError,
    InternalError,
    RequestTimeout,
    Unauthorized,
    Unavailable,
    error_from_wire,
)
from croupier.core.wire import MAX_CONTROL_FRAME_BYTES, Header, Kind, MsgType, decode_body, encode_body
from croupier.transports._conn_budget import ServerConnections
from croupier.transports._framing import (
    COPY_THRESHOLD,
    Frames,
    Payload,
    encode_error_body,
    parse_message,
    peek_ids,
    reply_frames,
)
from croupier.transports._peer_budget import DEFAULT_PEER_REPLY_BYTES, PeerBudget
from croupier.transports._zap import ZapHandler
from croupier.transports.auth import Signer, Verifier, request_frames
from croupier.transports.curve import CurveClient, CurveServer, timeout_hint
from croupier.transports.log_context import LOG_FIELDS, body_fields, enter

__all__ = [
    "Handler",
    "Reply",
    "Request",
    "Responder",
    "RpcClient",
    "RpcServer",
    "RpcServerStats",
]

logger = logging.getLogger(__name__)

# Bounded queues: with SNDHWM/RCVHWM counted in messages, memory is bounded by
# HWM x message size; 1000 is libzmq's default and plenty for request/reply.
_HWM = 1000
# The poll timeout is only a safety net: stop() and cross-thread replies wake the
# loop through the pipe, so the server never sleeps through work.
_POLL_MS = 1000
# While replies are in flight to some peer, the loop looks this often whether they left.
_REAP_MS = 10
# Messages read per wake-up before the loop looks at queued replies again, so a
# flood of requests cannot starve replies coming from worker threads.
_RECV_BATCH = 256
_STOP_JOIN_S = 10.0
_U64 = (1 << 64) - 1

_Context = zmq.Context[zmq.Socket[bytes]]
_Socket = zmq.Socket[bytes]


def _peer_name(peer: bytes) -> str:
    # Identities are opaque and may be up to 255 bytes; a prefix identifies them in logs.
    return peer[:8].hex()


def _nbytes(frames: Frames) -> int:
    # A handler's bad payload (not a buffer) is refused when it is sent, not here.
    return sum(len(f) for f in frames if isinstance(f, bytes | bytearray | memoryview))


def _type_name(msg_type: int) -> str:
    try:
        return f"{MsgType(msg_type).name}({msg_type})"
    except ValueError:
        return str(msg_type)


@dataclass(frozen=True)
class Request:
    """One well-formed request, as the handler sees it.

    ``payloads`` are zero-copy views of the received frames; they stay valid as
    long as a reference to them is kept. ``scheme`` is what the request proved
    (PROTOCOL §2.1): ``MEMBER``, ``APP`` (for the body's ``app_id``) or ``NONE``; a
    server without a verifier trusts every request as ``MEMBER``. ``frames`` are the
    received ZeroMQ frames of the payloads, in the same order (empty when the request
    did not come from a socket): sending one on again passes libzmq's buffer by
    reference, with no copy and no hand-off to pyzmq's garbage-collector thread.
    """

    msg_type: int
    request_id: int
    body: dict[str, Any]
    payloads: list[memoryview]
    peer: bytes
    scheme: Scheme = Scheme.MEMBER
    frames: tuple[zmq.Frame, ...] = ()


@dataclass(frozen=True)
class Reply:
    """A successful reply: the JSON body and zero-copy views of the payload frames."""

    body: dict[str, Any]
    payloads: list[memoryview]


@dataclass
class RpcServerStats:
    """Counters of one server. Written only by the server thread; read from anywhere.

    State:
        requests: messages received, well-formed or not.
        bad_requests: BAD_REQUEST replies (malformed framing, or raised by the handler).
        errors: other error replies (the handler's CroupierErrors and InternalErrors).
        internal_errors: handler crashes with a non-Croupier exception (also in ``errors``).
        replies: replies handed to libzmq, OK or not.
        unroutable: replies to peers that had gone (EHOSTUNREACH).
        dropped: replies not sent for another reason (peer at its HWM, server stopped).
        parked: requests held back because their peer had a full reply budget.
        shed: requests dropped because their peer's parked requests were full too.
        unauthorized: UNAUTHORIZED replies (PROTOCOL §2.1; also in ``errors``).
    """

    requests: int = 0
    bad_requests: int = 0
    errors: int = 0
    internal_errors: int = 0
    replies: int = 0
    unroutable: int = 0
    dropped: int = 0
    parked: int = 0
    shed: int = 0
    unauthorized: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Responder:
    """Sends the reply to one request, from any thread, exactly once.

    State:
        done: whether a reply has been claimed; later calls are ignored and logged.

    Payloads are sent zero-copy when they are 64 KiB or more: do not mutate a
    buffer after handing it to :meth:`ok`.
    """

    __slots__ = ("_done", "_lock", "_msg_type", "_peer", "_request_id", "_server")

    def __init__(self, server: RpcServer, peer: bytes, msg_type: int, request_id: int) -> None:
        self._server = server
        self._peer = peer
        self._msg_type = msg_type
        self._request_id = request_id
        self._lock = threading.Lock()
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def ok(self, body: dict[str, Any] | None = None, payloads: Sequence[Payload] = ()) -> None:
        """Reply OK with a JSON body and raw payload frames.

        A body that is not JSON-encodable is logged and turned into an INTERNAL
        error reply, so the client is not left waiting; nothing is raised.
        """
        if not self._claim("ok"):
            return
        try:
            data = encode_body(body if body is not None else {})
        except (TypeError, ValueError) as exc:
            logger.exception("%s: reply body for %s is not JSON-encodable", self._server.name, self._what())
            self._send_error(InternalError(f"reply body is not JSON-encodable: {exc}"))
            return
        frames = reply_frames(self._msg_type, self._request_id, 0, data, payloads)
        self._server._submit(self._peer, frames, None)

    def error(self, exc: CroupierError) -> None:
        """Reply with ``exc``'s status and ``exc.to_wire()`` as the body."""
        if self._claim("error"):
            self._send_error(exc)

    def _send_error(self, exc: CroupierError) -> None:
        status, data = encode_error_body(exc)
        self._server._submit(self._peer, reply_frames(self._msg_type, self._request_id, status, data), exc)

    def _claim(self, how: str) -> bool:
        with self._lock:
            if self._done:
                logger.warning("%s: second reply (%s) to %s ignored", self._server.name, how, self._what())
                return False
            self._done = True
            return True

    def _what(self) -> str:
        return f"request {self._request_id} {_type_name(self._msg_type)}"


Handler = Callable[[Request, Responder], None]


class _RateLimitedWarning:
    """At most ``burst`` warnings per second; the rest are counted and summarised."""

    def __init__(self, burst: int = 10) -> None:
        self._burst = burst
        self._window = 0.0
        self._in_window = 0
        self._suppressed = 0

    def __call__(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._window >= 1.0:
            if self._suppressed:
                logger.warning("%d similar warnings suppressed", self._suppressed)
            self._window, self._in_window, self._suppressed = now, 0, 0
        if self._in_window < self._burst:
            self._in_window += 1
            logger.warning(msg, *args)
        else:
            self._suppressed += 1


class RpcServer:
    """A ROUTER server; one thread owns the socket, receives and sends.

    State:
        stats: :class:`RpcServerStats`.
        url: the bound endpoint, known after :meth:`start`.

    The handler runs on the server thread and must not block for long; it may
    hand the :class:`Responder` to another thread. Replies from other threads go
    through a queue and a wake-up pipe watched by the poller, because the ROUTER
    socket is never touched outside the server thread.

    Parameters:
        bind: a ZeroMQ endpoint; ``tcp://127.0.0.1:0`` picks a free port.
        handler: called with each well-formed request and its responder.
        context: a shared context (needed for ``inproc://``); when None the
            server creates one and terminates it in :meth:`stop`.
        name: used in the thread name and in logs.
        max_message_bytes: libzmq drops connections that send a larger frame; the default
            suits control ports (``MAX_CONTROL_FRAME_BYTES``, 1 MiB).
        allowed_types: msg_types the server serves; others get BAD_REQUEST.
        on_batch_end: called on the server thread after each burst of requests it read,
            so that a handler can hand a whole burst to another thread at once.
        max_peer_reply_bytes: bytes of replies (of 64 KiB and more) one peer may leave
            unread; past it, its new requests wait (up to as many bytes of them) until
            its replies drain, and further ones are dropped. Other peers are not slowed.
        curve: bind as a CURVE server with this key pair (``croupier.transports.curve``);
            plaintext clients then get no answer.
        verifier: checks every request's auth frame before dispatch (PROTOCOL §2.1) and
            answers UNAUTHORIZED for the ones it refuses; None accepts every request.
    """

    def __init__(
        self,
        bind: str,
        handler: Handler,
        *,
        context: _Context | None = None,
        name: str = "rpc",
        max_message_bytes: int = MAX_CONTROL_FRAME_BYTES,
        allowed_types: Collection[int] | None = None,
        on_batch_end: Callable[[], None] | None = None,
        max_peer_reply_bytes: int = DEFAULT_PEER_REPLY_BYTES,
        curve: CurveServer | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.name = name
        self._curve = curve
        self._verifier = verifier
        self._budget = PeerBudget(max_peer_reply_bytes)
        self._on_batch_end = on_batch_end
        self.stats = RpcServerStats()
        self._bind = bind
        self._handler = handler
        self._given_context = context
        self._context: _Context | None = None
        self._max_message_bytes = max_message_bytes
        self._allowed = frozenset(int(t) for t in allowed_types) if allowed_types is not None else None
        self._url: str | None = None
        self._sock: _Socket | None = None
        self._thread: threading.Thread | None = None
        self._thread_ident: int | None = None
        self._lifecycle = threading.Lock()
        self._started = False
        self._stopped = False
        # Written by stop(), read by the loop: a plain bool is enough under the GIL.
        self._stopping = False
        self._outbox: queue.SimpleQueue[tuple[bytes, Frames, CroupierError | None]] = queue.SimpleQueue()
        # The pipe is closed by stop() while other threads may still reply; the
        # lock makes sure nobody writes to an fd number the OS has since reused.
        self._wake_lock = threading.Lock()
        self._wake_pending = False
        self._wake_r = -1
        self._wake_w = -1
        self._warn_bad = _RateLimitedWarning()
        self.connections = ServerConnections(name)
        self._zap: ZapHandler | None = None
        self._monitor: _Socket | None = None
        self._zap_domain = f"croupier/{name}/{id(self):x}"

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket and start the server thread.

        The socket is created and bound here so bind errors surface to the caller;
        it then moves to the server thread (thread start is a full memory barrier,
        which is what ZeroMQ requires to migrate a socket) and is never used here again.

        Raises:
            RuntimeError: started twice, or after stop().
            Unavailable: the endpoint cannot be bound (address in use, bad endpoint).
        """
        with self._lifecycle:
            if self._started or self._stopped:
                raise RuntimeError(f"{self.name}: an RpcServer can be started only once")
            self._started = True
            ctx = self._given_context if self._given_context is not None else zmq.Context()
            self._context = ctx
            sock = ctx.socket(zmq.ROUTER)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                # Without it, ROUTER silently drops replies to unknown peers or peers at HWM.
                sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
                sock.setsockopt(zmq.MAXMSGSIZE, self._max_message_bytes)
                sock.setsockopt(zmq.SNDHWM, _HWM)
                sock.setsockopt(zmq.RCVHWM, _HWM)
                self._guard_connections(ctx, sock)
                if self._curve is not None:
                    self._curve.apply(sock)
                sock.bind(self._bind)
                self._url = sock.getsockopt(zmq.LAST_ENDPOINT).decode()  # type: ignore[union-attr]
            except zmq.ZMQError as exc:
                sock.close(linger=0)
                self._unguard_connections()
                self._release_context()
                self._stopped = True
                raise Unavailable(f"{self.name}: cannot bind {self._bind}: {exc}") from exc
            self._sock = sock
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self._thread = threading.Thread(target=self._run, name=f"croupier-{self.name}", daemon=True)
            self._thread.start()
        logger.debug("%s: serving on %s", self.name, self._url)

    @property
    def max_peer_reply_bytes(self) -> int:
        """The per-peer reply budget, in bytes."""
        return self._budget.cap

    @property
    def url(self) -> str:
        """The bound endpoint, e.g. ``tcp://127.0.0.1:53211``.

        Raises:
            RuntimeError: the server has not been started.
        """
        if self._url is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._url

    def stop(self) -> None:
        """Stop the thread, close the socket (linger 0) and the wake-up pipe. Idempotent.

        Replies already queued are sent before the socket closes; replies made
        later are dropped. Terminates the context only if the server created it.

        Raises:
            RuntimeError: called from the handler (the server thread cannot join itself).
        """
        if self._thread_ident is not None and threading.get_ident() == self._thread_ident:
            raise RuntimeError(f"{self.name}: stop() called from the server thread")
        with self._lifecycle:
            if self._stopped:
                return
            self._stopped = True
            self._stopping = True
            thread = self._thread
        if thread is not None:
            self._wake()
            thread.join(_STOP_JOIN_S)
            if thread.is_alive():
                # A handler is stuck: terminating the context would hang too.
                logger.error("%s: server thread did not stop within %.0f s", self.name, _STOP_JOIN_S)
                return
        with self._wake_lock:
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1
        self._unguard_connections()
        self._release_context()
        logger.debug("%s: stopped; stats %s", self.name, self.stats.as_dict())

    def _guard_connections(self, ctx: _Context, sock: _Socket) -> None:
        """Put every new connection to ZAP, where the connection budget may refuse it.

        Without a ZAP handler (the endpoint is taken in this context, or no thread can start)
        the server runs without a budget and says so.
        """
        try:
            zap = ZapHandler.acquire(ctx)
        except (zmq.ZMQError, RuntimeError) as exc:
            logger.warning("%s: no connection budget (no ZAP handler: %s)", self.name, exc)
            return
        self._zap = zap
        # Not EVENT_ACCEPT_FAILED: libzmq retries a failed accept in a loop, one event per try.
        events = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
        self._monitor = sock.get_monitor_socket(events)
        zap.watch(self._monitor, self.connections.on_event)
        zap.add_policy(self._zap_domain, self.connections.policy)
        sock.setsockopt(zmq.ZAP_DOMAIN, self._zap_domain.encode())

    def _unguard_connections(self) -> None:
        """After the socket is closed: stop counting its connections, give the ZAP handler back."""
        zap, self._zap = self._zap, None
        if zap is None:
            return
        if self._monitor is not None:
            zap.unwatch(self._monitor)
            self._monitor = None
        zap.remove_policy(self._zap_domain, self.connections.policy)
        self.connections.close()
        zap.release()

    def _release_context(self) -> None:
        if self._given_context is None and self._context is not None:
            self._context.term()
        self._context = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- cross-thread replies ---------------------------------------------------

    def _submit(self, peer: bytes, frames: Frames, error: CroupierError | None) -> None:
        """Send now when on the server thread, else queue and wake the poller."""
        if threading.get_ident() == self._thread_ident:
            self._send(peer, frames, error)
            return
        if self._stopping:
            logger.debug("%s: reply after stop dropped", self.name)
            return
        self._outbox.put((peer, frames, error))
        self._wake()

    def _wake(self) -> None:
        # One byte per pending wake-up, not per reply: a burst of replies from the
        # committer costs one syscall. The flag is cleared before the loop drains.
        if self._wake_pending:
            return
        with self._wake_lock:
            if self._wake_w < 0:
                return
            self._wake_pending = True
            # A full pipe means a wake-up is already pending.
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"\x01")

    def _drain_wake(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(fd, 4096):
                pass
        # Cleared after reading and before the outbox is drained: a producer that saw the
        # flag set put its reply in before this point, so the drain that follows sends it.
        self._wake_pending = False

    def _drain_outbox(self) -> None:
        while True:
            try:
                peer, frames, error = self._outbox.get_nowait()
            except queue.Empty:
                return
            self._send(peer, frames, error)

    # -- the server thread ------------------------------------------------------

    def _run(self) -> None:
        self._thread_ident = threading.get_ident()
        sock = self._sock
        wake_fd = self._wake_r
        assert sock is not None
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake_fd, zmq.POLLIN)
        try:
            while not self._stopping:
                try:
                    events = dict(poller.poll(_REAP_MS if self._budget.busy else _POLL_MS))
                    if events.get(wake_fd):
                        self._drain_wake(wake_fd)
                    if events.get(sock):
                        self._drain_socket(sock)
                    self._drain_outbox()
                    self._resume_parked()
                except zmq.ContextTerminated:
                    logger.error("%s: context terminated under a running server", self.name)
                    return
                except Exception:
                    # Never let one bad turn kill the server; back off a little so a
                    # persistent fault does not spin the CPU.
                    logger.exception("%s: unexpected error in the server loop", self.name)
                    time.sleep(0.01)
            self._drain_outbox()
        finally:
            sock.close(linger=0)
            self._sock = None
            # Thread idents are reused: a later thread must not pass for this one.
            self._thread_ident = None

    def _drain_socket(self, sock: _Socket) -> None:
        try:
            for _ in range(_RECV_BATCH):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    return
                try:
                    self._handle(frames)
                except Exception:
                    logger.exception("%s: unexpected error handling a message", self.name)
        finally:
            if self._on_batch_end is not None:
                try:
                    self._on_batch_end()
                except Exception:
                    logger.exception("%s: on_batch_end failed", self.name)

    def _resume_parked(self) -> None:
        """Handle parked requests of the peers whose replies have drained below their cap."""
        for peer in self._budget.reap():
            while (frames := self._budget.unpark(peer)) is not None:
                try:
                    self._dispatch(frames)
                except Exception:
                    logger.exception("%s: unexpected error handling a parked message", self.name)

    def _handle(self, frames: list[zmq.Frame]) -> None:
        self.stats.requests += 1
        peer = frames[0].bytes
        if self._budget.over(peer):
            # The peer is not reading its replies: its requests wait, the others' do not.
            if self._budget.park(peer, frames):
                self.stats.parked += 1
            else:
                self.stats.shed += 1
                self._warn_bad("%s: peer %s reads no replies; request shed", self.name, _peer_name(peer))
            return
        self._dispatch(frames)

    def _dispatch(self, frames: list[zmq.Frame]) -> None:
        self._budget.admitted(frames[0].bytes)
        self._answer(frames)

    def _answer(self, frames: list[zmq.Frame]) -> None:
        peer = frames[0].bytes
        views = [f.buffer for f in frames[1:]]
        try:
            msg = parse_message(views, Kind.REQUEST)
            if self._allowed is not None and msg.header.msg_type not in self._allowed:
                raise BadRequest(f"{self.name} does not serve msg_type {msg.header.msg_type}")
        except BadRequest as exc:
            msg_type, request_id = peek_ids(views[0]) if views else (0, 0)
            _, data = encode_error_body(exc)
            self._send(peer, reply_frames(msg_type, request_id, exc.status, data), exc)
            return
        header = msg.header
        scheme = Scheme.MEMBER
        if self._verifier is not None:
            try:
                scheme = self._verifier.check(
                    header.msg_type, views[0], msg.body, views[1], msg.auth, msg.payloads
                )
            except Unauthorized as exc:
                self._refuse(peer, header.msg_type, header.request_id, exc)
                return
        kept = tuple(frames[len(frames) - len(msg.payloads) :]) if msg.payloads else ()
        request = Request(header.msg_type, header.request_id, msg.body, msg.payloads, peer, scheme, kept)
        responder = Responder(self, peer, header.msg_type, header.request_id)
        # the request's app and shuffle ids go on the lines logged while handling it
        fields = body_fields(msg.body)
        token = None if fields is None else enter(fields)
        try:
            self._handler(request, responder)
        except CroupierError as exc:
            if responder.done:
                logger.warning(
                    "%s: handler raised %r after replying to %s", self.name, exc, responder._what()
                )
            else:
                responder.error(exc)
        except Exception as exc:
            self.stats.internal_errors += 1
            logger.exception("%s: handler failed on %s", self.name, responder._what())
            if not responder.done:
                responder.error(InternalError(f"{type(exc).__name__} handling {_type_name(header.msg_type)}"))
        finally:
            if token is not None:
                LOG_FIELDS.reset(token)

    def _refuse(self, peer: bytes, msg_type: int, request_id: int, exc: Unauthorized) -> None:
        """Answer UNAUTHORIZED; why goes to the (rate-limited) log only, never to the sender."""
        self.stats.unauthorized += 1
        self._warn_bad(
            "%s: UNAUTHORIZED %s from peer %s: %s",
            self.name,
            _type_name(msg_type),
            _peer_name(peer),
            exc.message,
        )
        _, data = encode_error_body(Unauthorized(f"{_type_name(msg_type)} refused: not authorized"))
        self._send(peer, reply_frames(msg_type, request_id, exc.status, data), exc)

    def _send(self, peer: bytes, frames: Frames, error: CroupierError | None) -> None:
        # Count before sending, so a client that got the reply sees the counter.
        if isinstance(error, BadRequest):
            self.stats.bad_requests += 1
            self._warn_bad("%s: BAD_REQUEST from peer %s: %s", self.name, _peer_name(peer), error.message)
        elif error is not None:
            self.stats.errors += 1
        sock = self._sock
        if sock is None:
            self.stats.dropped += 1
            return
        # Counted as sent first and taken back on failure, for the same reason.
        self.stats.replies += 1
        self._budget.replied(peer, _nbytes(frames))
        try:
            # copy=False: pyzmq still copies frames under 64 KiB and sends larger ones zero-copy.
            # NOBLOCK: the server thread must never wait on one slow peer.
            self._send_tracked(sock, peer, frames)
        except zmq.Again:
            self.stats.replies -= 1
            self.stats.dropped += 1
            logger.warning("%s: peer %s is at its send HWM; reply dropped", self.name, _peer_name(peer))
        except zmq.ZMQError as exc:
            self.stats.replies -= 1
            if exc.errno == zmq.EHOSTUNREACH:
                self.stats.unroutable += 1
                logger.debug("%s: peer %s has gone; reply dropped", self.name, _peer_name(peer))
            else:
                self.stats.dropped += 1
                logger.warning("%s: reply to %s failed: %s", self.name, _peer_name(peer), exc)
        except Exception as exc:
            # A payload pyzmq cannot send (a handler's bug): answer INTERNAL in its place,
            # so that the client is not left waiting and the loop goes on.
            self.stats.replies -= 1
            logger.exception("%s: reply to %s could not be sent", self.name, _peer_name(peer))
            if error is None:
                self._send_internal(peer, frames[0], exc)
            else:
                self.stats.dropped += 1

    def _send_tracked(self, sock: _Socket, peer: bytes, frames: Frames) -> None:
        """Send a reply; one whose last frame goes zero-copy is charged to the peer's budget.

        pyzmq tracks only the last frame, which libzmq releases after the earlier ones.
        """
        track = len(frames[-1]) >= COPY_THRESHOLD
        tracker = sock.send_multipart([peer, *frames], flags=zmq.NOBLOCK, copy=False, track=track)
        if track and tracker is not None:
            self._budget.charge(peer, tracker, _nbytes(frames))

    def _send_internal(self, peer: bytes, header: Payload, exc: Exception) -> None:
        """Replace an OK reply that could not be sent by an INTERNAL error reply."""
        self.stats.internal_errors += 1
        msg_type, request_id = peek_ids(header)
        error = InternalError(f"the reply could not be sent: {type(exc).__name__}")
        _, data = encode_error_body(error)
        self._send(peer, reply_frames(msg_type, request_id, error.status, data), error)


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
                    return reply
                # Lazy pirate: a socket that timed out may hold a half-dead
                # connection or a queue of stale requests; start afresh.
                self._drop_socket()
                logger.debug("%s to %s: try %d timed out", _type_name(msg_type), self.url, attempt + 1)
            raise RequestTimeout(
                f"no reply from {self.url} to {_type_name(msg_type)} within {timeout:g} s "
                f"({retries + 1} tries){timeout_hint(self._curve)}",
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
            raise Unavailable(f"{_type_name(msg_type)} to {self.url} failed: {exc}") from exc

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
                raise InternalError(f"malformed reply from {self.url} to {_type_name(msg_type)}")
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
