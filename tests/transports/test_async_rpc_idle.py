"""A client stops dialling a peer it no longer uses (the noticed item of stop 30).

libzmq redials a connected DEALER's endpoint for as long as the socket is open, every
100 ms by default. A master whose worker died kept sending ZMTP greetings to that port for
ever, to whatever service bound it later (a PySpark JVM's auth socket read ``FF 00 00 00``
as a length and failed). ``AsyncRpcClient`` closes a peer's socket once it has had nothing
in flight for ``idle_close`` seconds. (``RECONNECT_IVL_MAX`` would not help: the squatter
accepts, so libzmq counts each dial as a success and resets its back-off.)
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

import zmq

from croupier.core.errors import CroupierError
from croupier.core.wire import MsgType
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.rpc import RpcServer
from tests.transports.test_async_rpc_survives import echo

_Ctx = zmq.Context[zmq.Socket[bytes]]


class Squatter:
    """A plain TCP service that took over a dead server's port: it counts the connections
    made to it, reads what each sends and hangs up (as PySpark's auth server did)."""

    def __init__(self, port: int) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            for _ in range(50):  # libzmq's I/O thread closes the server's listener a moment later
                try:
                    self._sock.bind(("127.0.0.1", port))
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                self._sock.bind(("127.0.0.1", port))
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(0.1)
        self.accepted: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                self.accepted.append(time.monotonic())
                conn.settimeout(0.2)
                with contextlib.suppress(OSError):
                    conn.recv(64)

    def since(self, t: float) -> int:
        return sum(1 for a in self.accepted if a >= t)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def test_an_idle_peer_that_died_is_not_redialled_for_ever(ctx: _Ctx) -> None:
    client = AsyncRpcClient(context=ctx, timeout=5, idle_close=1.0)
    client.start()
    squatter: Squatter | None = None
    try:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx) as server:
            url = server.url
            done: queue.Queue[CroupierError | None] = queue.Queue()
            client.send(url, MsgType.PING, {}, (), lambda _r, e: done.put(e))
            assert done.get(timeout=10) is None
        squatter = Squatter(int(url.rsplit(":", 1)[1]))
        time.sleep(3.0)  # the idle peer is closed after 1 s of nothing in flight
        quiet_from = time.monotonic()
        time.sleep(2.0)
        assert squatter.since(quiet_from) == 0, (
            f"{squatter.since(quiet_from)} connections to a dead peer's port in 2 s "
            f"({len(squatter.accepted)} in all)"
        )
        # the client still works: a new request to the same URL reconnects
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx) as again:
            client.send(again.url, MsgType.PING, {}, (), lambda _r, e: done.put(e))
            assert done.get(timeout=10) is None
    finally:
        client.stop()
        if squatter is not None:
            squatter.close()


def test_a_busy_peer_is_kept(ctx: _Ctx) -> None:
    """A peer used more often than ``idle_close`` keeps its socket (no reconnect per request)."""
    client = AsyncRpcClient(context=ctx, timeout=5, idle_close=1.0)
    client.start()
    try:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx) as server:
            done: queue.Queue[CroupierError | None] = queue.Queue()
            for _ in range(6):
                client.send(server.url, MsgType.PING, {}, (), lambda _r, e: done.put(e))
                assert done.get(timeout=10) is None
                time.sleep(0.4)
            assert client.peers_closed_idle == 0
    finally:
        client.stop()
