"""A ZAP handler (ZeroMQ RFC 27) per context: one thread that answers libzmq's ZAP requests
with the policies registered for each domain, and reads socket monitors for them.

libzmq asks ``inproc://zeromq.zap.01`` of the socket's own context about every new
connection to a socket whose ``ZMQ_ZAP_DOMAIN`` is set, once the peer's greeting is read and
before any message of it is delivered. A refusal (status 400) makes libzmq send the ZMTP
``ERROR`` command and close the connection; a libzmq client then does not reconnect on its own.

Policies are chained per domain: the first that does not answer 200 decides, so another
mechanism (CURVE key checks, say) can be added to a domain next to the connection budget
(:mod:`croupier.transports._conn_budget`) without either knowing of the other. Monitor
events are handled on the same thread, before each ZAP request, so that a policy counting
connections sees the connection it is asked about.

State (per context):
    refs: servers using the handler; the last :meth:`ZapHandler.release` stops the thread
        and closes its sockets, which must happen before the context is terminated.
    policies: domain -> list of policies; a domain without any is allowed (as when no ZAP
        handler runs at all).
    monitors: monitor sockets (owned by the thread) -> the sink their events go to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import zmq
from zmq.utils.monitor import parse_monitor_message

__all__ = ["ZAP_ENDPOINT", "EventSink", "Policy", "ZapHandler", "ZapRequest", "ZapVerdict"]

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_POLL_MS = 1000
_STOP_JOIN_S = 5.0

_Context = zmq.Context[zmq.Socket[bytes]]
_Socket = zmq.Socket[bytes]


@dataclass(frozen=True)
class ZapRequest:
    """One ZAP request: the domain of the socket, the peer's address, its mechanism and credentials."""

    domain: str
    address: str
    identity: bytes
    mechanism: str
    credentials: tuple[bytes, ...]


@dataclass(frozen=True)
class ZapVerdict:
    """A ZAP reply: 200 allows; 300 (temporary), 400 (refused) and 500 (internal) close the connection."""

    status: int
    text: str = ""
    user_id: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


ALLOW = ZapVerdict(200, "OK")

Policy = Callable[[ZapRequest], ZapVerdict]
EventSink = Callable[[int, int], None]
"""Called on the ZAP thread with each monitor event's number and value (for most, a descriptor)."""

_Command = tuple[str, _Socket | None, EventSink | None, threading.Event | None]


class ZapHandler:
    """The ZAP handler of one context; get it with :meth:`acquire`, give it back with :meth:`release`.

    Raises (acquire):
        zmq.ZMQError: the ZAP endpoint is already bound in this context by someone else.
        RuntimeError: the thread cannot be started.
    """

    _registry_lock: ClassVar[threading.Lock] = threading.Lock()
    _by_context: ClassVar[dict[int, ZapHandler]] = {}

    def __init__(self, context: _Context) -> None:
        self._context = context
        self._refs = 0
        self._policies: dict[str, list[Policy]] = {}
        self._policy_lock = threading.Lock()
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._zap: _Socket | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def acquire(cls, context: _Context) -> ZapHandler:
        """The handler of ``context``, started on first use. Pair every call with :meth:`release`."""
        with cls._registry_lock:
            handler = cls._by_context.get(id(context))
            if handler is None:
                handler = cls(context)
                try:
                    handler._start()
                except BaseException:
                    handler._close_pipe()
                    raise
                cls._by_context[id(context)] = handler
            handler._refs += 1
            return handler

    def release(self) -> None:
        """Drop one reference; the last one stops the thread and closes its sockets."""
        with ZapHandler._registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            del ZapHandler._by_context[id(self._context)]
        self._call("stop")
        if self._thread is not None:
            self._thread.join(_STOP_JOIN_S)
        self._close_pipe()

    # -- registration (any thread) --------------------------------------------------------

    def add_policy(self, domain: str, policy: Policy) -> None:
        """Add ``policy`` to the chain of ``domain`` (the hook other mechanisms use)."""
        with self._policy_lock:
            self._policies.setdefault(domain, []).append(policy)

    def remove_policy(self, domain: str, policy: Policy) -> None:
        with self._policy_lock:
            chain = self._policies.get(domain, [])
            if policy in chain:
                chain.remove(policy)
            if not chain:
                self._policies.pop(domain, None)

    def watch(self, monitor: _Socket, sink: EventSink) -> None:
        """Hand a monitor socket (from ``sock.get_monitor_socket()``) to the thread, which owns it now."""
        self._call("watch", monitor, sink)

    def unwatch(self, monitor: _Socket) -> None:
        """Close a watched monitor socket (on the thread); returns once it is closed."""
        self._call("unwatch", monitor)

    def _call(self, what: str, sock: _Socket | None = None, sink: EventSink | None = None) -> None:
        done = threading.Event()
        self._commands.put((what, sock, sink, done))
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\x01")
        thread = self._thread
        if thread is not None and thread.is_alive():
            done.wait(_STOP_JOIN_S)

    # -- the thread ---------------------------------------------------------------------------

    def _start(self) -> None:
        zap = self._context.socket(zmq.ROUTER)
        try:
            zap.setsockopt(zmq.LINGER, 0)
            zap.bind(ZAP_ENDPOINT)
        except zmq.ZMQError:
            zap.close(linger=0)
            raise
        self._zap = zap
        self._thread = threading.Thread(target=self._run, name="croupier-zap", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:
            zap.close(linger=0)
            self._zap = None
            self._thread = None
            raise

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def _run(self) -> None:
        zap = self._zap
        assert zap is not None
        monitors: dict[_Socket, EventSink] = {}
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while self._commands_done(poller, monitors):
                try:
                    ready = dict(poller.poll(_POLL_MS))
                    self._drain_monitors(monitors)
                    if ready.get(zap):
                        self._answer_all(zap, monitors)
                except zmq.ContextTerminated:
                    return
                except Exception:
                    logger.exception("ZAP handler: unexpected error")
        finally:
            for monitor in monitors:
                monitor.close(linger=0)
            zap.close(linger=0)

    def _commands_done(self, poller: zmq.Poller, monitors: dict[_Socket, EventSink]) -> bool:
        """Run queued commands; False once told to stop."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._wake_r, 4096):
                pass
        while True:
            try:
                what, sock, sink, done = self._commands.get_nowait()
            except queue.Empty:
                return True
            try:
                if what == "stop":
                    return False
                assert sock is not None
                if what == "watch" and sink is not None:
                    monitors[sock] = sink
                    poller.register(sock, zmq.POLLIN)
                elif what == "unwatch" and sock in monitors:
                    self._drain_monitors({sock: monitors.pop(sock)})
                    poller.unregister(sock)
                    sock.close(linger=0)
            finally:
                if done is not None:
                    done.set()

    @staticmethod
    def _drain_monitors(monitors: dict[_Socket, EventSink]) -> None:
        for monitor, sink in monitors.items():
            while True:
                try:
                    frames = monitor.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                event = parse_monitor_message(frames)
                try:
                    sink(int(event["event"]), int(event["value"]))
                except Exception:
                    logger.exception("ZAP handler: a monitor sink failed")

    def _answer_all(self, zap: _Socket, monitors: dict[_Socket, EventSink]) -> None:
        while True:
            try:
                frames = zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            # The connection asked about was accepted before it was put to ZAP: count it first.
            self._drain_monitors(monitors)
            reply = self._reply(frames)
            if reply is not None:
                zap.send_multipart(reply)

    def _reply(self, frames: list[bytes]) -> list[bytes] | None:
        # [routing id, "", version, request id, domain, address, identity, mechanism, credentials...]
        if len(frames) < 8 or frames[1] != b"":
            logger.warning("ZAP handler: malformed request of %d frames ignored", len(frames))
            return None
        envelope, version, request_id = frames[0], frames[2], frames[3]
        if version != b"1.0":
            verdict = ZapVerdict(500, "unsupported ZAP version")
        else:
            request = ZapRequest(
                domain=frames[4].decode(errors="replace"),
                address=frames[5].decode(errors="replace"),
                identity=frames[6],
                mechanism=frames[7].decode(errors="replace"),
                credentials=tuple(frames[8:]),
            )
            verdict = self._decide(request)
        return [
            envelope,
            b"",
            b"1.0",
            request_id,
            str(verdict.status).encode(),
            verdict.text.encode(),
            verdict.user_id.encode(),
            b"",
        ]

    def _decide(self, request: ZapRequest) -> ZapVerdict:
        with self._policy_lock:
            chain = list(self._policies.get(request.domain, ()))
        for policy in chain:
            try:
                verdict = policy(request)
            except Exception:
                logger.exception("ZAP handler: policy for domain %r failed", request.domain)
                return ZapVerdict(500, "internal error")
            if not verdict.allowed:
                return verdict
        return ALLOW
