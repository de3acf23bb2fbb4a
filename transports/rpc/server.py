"""``RpcServer``: a ROUTER server; one thread owns the socket, receives and sends.

The framing is in :mod:`croupier.transports.rpc`; replies from other threads reach the server
thread through the shared hand-off and loop of :mod:`croupier.transports._loop`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, NamedTuple, Self

import zmq

from croupier.core.access import Scheme
from croupier.core.errors import BadRequest, CroupierError, InternalError, Unauthorized, Unavailable
from croupier.core.wire import MAX_CONTROL_FRAME_BYTES, Kind
from croupier.transports._conn_budget import ServerConnections
from croupier.transports._framing import (
    COPY_THRESHOLD,
    Frames,
    Payload,
    encode_error_body,
    parse_message,
    peek_ids,
    reply_frames,
    type_name,
)
from croupier.transports._json import encode_body
from croupier.transports._loop import Mailbox, run_loop
from croupier.transports._peer_budget import DEFAULT_PEER_REPLY_BYTES, PeerBudget
from croupier.transports._zap import ZapHandler
from croupier.transports._zmqio import recv_frames, send_frames
from croupier.transports.auth import Verifier
from croupier.transports.curve import CurveServer
from croupier.transports.log_context import LOG_FIELDS, enter, lazy_ids

__all__ = ["Handler", "Request", "Responder", "RpcServer", "RpcServerStats"]

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

_Context = zmq.Context[zmq.Socket[bytes]]
_Socket = zmq.Socket[bytes]


def _peer_name(peer: bytes) -> str:
    # Identities are opaque and may be up to 255 bytes; a prefix identifies them in logs.
    return peer[:8].hex()


def _nbytes(frames: Frames) -> int:
    # A handler's bad payload (not a buffer) is refused when it is sent, not here.
    try:
        return sum(map(len, frames))  # the common case (bytes), without a check per frame
    except TypeError:
        return sum(len(f) for f in frames if isinstance(f, bytes | bytearray | memoryview))


class Request(NamedTuple):
    """One well-formed request, as the handler sees it (immutable: a named tuple, which costs a
    third of a frozen dataclass to build, once per request).

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
        shed: requests dropped because their peer's parked requests were full too, or because
            the peer disconnected while they were parked.
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
        return f"request {self._request_id} {type_name(self._msg_type)}"


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
        # replies made on other threads, for the server thread to send
        self._outbox: Mailbox[tuple[bytes, Frames, CroupierError | None]] = Mailbox()
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
            self._outbox.open()
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
            self._outbox.wake()
            thread.join(_STOP_JOIN_S)
            if thread.is_alive():
                # A handler is stuck: terminating the context would hang too.
                logger.error("%s: server thread did not stop within %.0f s", self.name, _STOP_JOIN_S)
                return
        self._outbox.close()
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
        # one wake-up byte per burst, not per reply: a burst from the committer costs one syscall
        self._outbox.put((peer, frames, error))

    def _drain_outbox(self) -> None:
        for peer, frames, error in self._outbox.drain():
            self._send(peer, frames, error)

    # -- the server thread ------------------------------------------------------

    def _run(self) -> None:
        self._thread_ident = threading.get_ident()
        sock = self._sock
        wake_fd = self._outbox.fd
        assert sock is not None
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(wake_fd, zmq.POLLIN)

        def turn() -> None:
            events = dict(poller.poll(_REAP_MS if self._budget.busy else _POLL_MS))
            self._outbox.clear(bool(events.get(wake_fd)))
            if events.get(sock):
                self._drain_socket(sock)
            self._drain_outbox()
            self._resume_parked()

        try:
            if run_loop(self.name, "server", lambda: self._stopping, turn, logger):
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
                    frames = recv_frames(sock)
                except zmq.Again:
                    return
                try:
                    self._handle(frames)
                except Exception:
                    logger.exception("%s: unexpected error handling a message", self.name)
        finally:
            self._end_batch()

    def _end_batch(self) -> None:
        if self._on_batch_end is not None:
            try:
                self._on_batch_end()
            except Exception:
                logger.exception("%s: on_batch_end failed", self.name)

    def _resume_parked(self) -> None:
        """Handle parked requests of the peers whose replies have drained below their cap;
        they are a burst too (a handler may wait for its end before it answers)."""
        resumed = False
        for peer in self._budget.reap():
            while not self._stopping and (frames := self._budget.unpark(peer)) is not None:
                resumed = True
                try:
                    self._dispatch(frames)
                except Exception:
                    logger.exception("%s: unexpected error handling a parked message", self.name)
        if resumed:
            self._end_batch()

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
            except CroupierError as exc:  # the verifier's answer for an app unknown here
                Responder(self, peer, header.msg_type, header.request_id).error(exc)
                return
        kept = tuple(frames[len(frames) - len(msg.payloads) :]) if msg.payloads else ()
        request = Request(header.msg_type, header.request_id, msg.body, msg.payloads, peer, scheme, kept)
        responder = Responder(self, peer, header.msg_type, header.request_id)
        # the request's app and shuffle ids go on the lines logged while handling it
        body = msg.body
        app, shuffle = body.get("app_id"), body.get("shuffle_id")
        token = None if app is None and shuffle is None else enter(lazy_ids(app, shuffle))
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
                responder.error(InternalError(f"{type(exc).__name__} handling {type_name(header.msg_type)}"))
        finally:
            if token is not None:
                LOG_FIELDS.reset(token)

    def _refuse(self, peer: bytes, msg_type: int, request_id: int, exc: Unauthorized) -> None:
        """Answer UNAUTHORIZED with its public reason; the detail goes to the (rate-limited) log only."""
        self.stats.unauthorized += 1
        self._warn_bad(
            "%s: UNAUTHORIZED %s from peer %s: %s",
            self.name,
            type_name(msg_type),
            _peer_name(peer),
            exc.message,
        )
        # Only the coarse public reason (PROTOCOL §2.1) goes back; the log has the detail.
        reason = exc.details.get("reason", "not authorized")
        refusal = Unauthorized(f"{type_name(msg_type)} refused: {reason}", {"reason": reason})
        _, data = encode_error_body(refusal)
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
                dropped = self._budget.gone(peer)
                self.stats.shed += dropped
                logger.debug(
                    "%s: peer %s has gone; reply and %d parked requests dropped",
                    self.name,
                    _peer_name(peer),
                    dropped,
                )
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
        tracker = send_frames(sock, [peer, *frames], track)
        if track and tracker is not None:
            self._budget.charge(peer, tracker, _nbytes(frames))

    def _send_internal(self, peer: bytes, header: Payload, exc: Exception) -> None:
        """Replace an OK reply that could not be sent by an INTERNAL error reply."""
        self.stats.internal_errors += 1
        msg_type, request_id = peek_ids(header)
        error = InternalError(f"the reply could not be sent: {type(exc).__name__}")
        _, data = encode_error_body(error)
        self._send(peer, reply_frames(msg_type, request_id, error.status, data), error)
