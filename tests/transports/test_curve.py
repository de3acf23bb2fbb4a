"""CURVE on RpcServer, RpcClient, AsyncRpcClient and MasterClient (``--curve``, docs/guides/security.md)."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from zmq.utils import z85

from croupier.core.errors import BadRequest, CroupierError, RequestTimeout
from croupier.core.wire import MsgType
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.curve import (
    CURVE_KEY_ENV,
    CurveClient,
    CurveServer,
    curve_client_from_env,
)
from croupier.transports.rpc import Reply, Request, Responder, RpcClient, RpcServer
from croupier.transports.secret import ClusterSecret

KEYS = CurveServer.from_secret(ClusterSecret(bytes(range(32))))
OTHER = CurveServer.from_secret(ClusterSecret(bytes(32)))
SECRET_TEXT = b"a very secret record that must not cross the wire in the clear"


def _echo(request: Request, responder: Responder) -> None:
    responder.ok({"echo": request.body}, [bytes(p) for p in request.payloads])


@pytest.fixture
def curve_server() -> Iterator[RpcServer]:
    server = RpcServer("tcp://127.0.0.1:0", _echo, name="curve-test", curve=KEYS)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def plain_server() -> Iterator[RpcServer]:
    server = RpcServer("tcp://127.0.0.1:0", _echo, name="plain-test")
    server.start()
    yield server
    server.stop()


def test_keys_are_derived_from_the_secret_and_checked() -> None:
    assert len(KEYS.public) == 40 and KEYS.public != OTHER.public
    assert KEYS.client() == CurveClient(KEYS.public)
    assert CurveClient.parse(f"  {KEYS.public.decode()}\n") == KEYS.client()
    assert KEYS.secret.decode() not in repr(KEYS)
    with pytest.raises(BadRequest, match="not a CURVE key"):
        CurveClient.parse("not-a-key")
    with pytest.raises(BadRequest, match="not a CURVE key"):
        CurveClient(b"\x00" * 40)


def test_the_server_key_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CURVE_KEY_ENV, raising=False)
    assert curve_client_from_env(None) is None
    assert curve_client_from_env(KEYS.public.decode()) == KEYS.client()
    monkeypatch.setenv(CURVE_KEY_ENV, OTHER.public.decode())
    assert curve_client_from_env(None) == OTHER.client()
    assert curve_client_from_env(KEYS.public) == KEYS.client()


def test_round_trip_over_curve(curve_server: RpcServer) -> None:
    with RpcClient(curve_server.url, timeout=5, retries=0, curve=KEYS.client()) as client:
        reply = client.call(MsgType.PING, {"x": 1}, [SECRET_TEXT])
    assert reply.body == {"echo": {"x": 1}}
    assert [bytes(p) for p in reply.payloads] == [SECRET_TEXT]


def test_the_sockets_use_the_curve_mechanism(curve_server: RpcServer) -> None:
    with RpcClient(curve_server.url, timeout=5, retries=0, curve=KEYS.client()) as client:
        client.call(MsgType.PING)
        assert client._sock is not None
        assert client._sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
    assert curve_server._sock is not None
    assert curve_server._sock.getsockopt(zmq.MECHANISM) == zmq.CURVE


def test_async_round_trip_over_curve(curve_server: RpcServer) -> None:
    client = AsyncRpcClient(timeout=5, name="curve-async", curve=KEYS.client())
    client.start()
    got: queue.SimpleQueue[tuple[Reply | None, CroupierError | None]] = queue.SimpleQueue()
    try:
        for i in range(3):
            client.send(curve_server.url, MsgType.PING, {"i": i}, [SECRET_TEXT], lambda r, e: got.put((r, e)))
        replies = [got.get(timeout=10) for _ in range(3)]
    finally:
        client.stop()
    assert all(error is None for _, error in replies)
    assert sorted(r.body["echo"]["i"] for r, _ in replies if r is not None) == [0, 1, 2]


def test_a_plaintext_client_gets_no_answer_and_a_clear_error(curve_server: RpcServer) -> None:
    with (
        RpcClient(curve_server.url, timeout=0.5, retries=0) as client,
        pytest.raises(RequestTimeout, match="may require CURVE") as caught,
    ):
        client.call(MsgType.PING)
    assert "croupier secret-public" in caught.value.message
    assert curve_server.stats.requests == 0


def test_a_client_with_another_key_gets_no_answer(curve_server: RpcServer) -> None:
    with (
        RpcClient(curve_server.url, timeout=0.5, retries=0, curve=OTHER.client()) as client,
        pytest.raises(RequestTimeout, match="its key may differ"),
    ):
        client.call(MsgType.PING)
    assert curve_server.stats.requests == 0


def test_a_curve_client_gets_no_answer_from_a_plaintext_server(plain_server: RpcServer) -> None:
    with (
        RpcClient(plain_server.url, timeout=0.5, retries=0, curve=KEYS.client()) as client,
        pytest.raises(RequestTimeout, match="uses CURVE"),
    ):
        client.call(MsgType.PING)
    assert plain_server.stats.requests == 0


def test_an_async_plaintext_client_times_out_with_the_hint(curve_server: RpcServer) -> None:
    client = AsyncRpcClient(timeout=0.5, name="plain-async")
    client.start()
    got: queue.SimpleQueue[CroupierError | None] = queue.SimpleQueue()
    try:
        client.send(curve_server.url, MsgType.PING, {}, [], lambda _r, e: got.put(e))
        error = got.get(timeout=10)
    finally:
        client.stop()
    assert isinstance(error, RequestTimeout) and "may require CURVE" in error.message


class _Tap:
    """A TCP relay between one client and a server that records every byte both ways."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        accept = threading.Thread(target=self._accept, name="tap-accept", daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self._listener.accept()
            server = socket.create_connection(("127.0.0.1", self._upstream))
            self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                pump = threading.Thread(target=self._pump, args=(a, b), name="tap-pump", daemon=True)
                pump.start()
                self._threads.append(pump)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                with self._lock:
                    self.seen += chunk
                dst.sendall(chunk)

    def close(self) -> None:
        self._listener.close()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)


def _captured(server: RpcServer, curve: CurveClient | None) -> bytes:
    tap = _Tap(int(server.url.rsplit(":", 1)[1]))
    try:
        with RpcClient(tap.url, timeout=5, retries=0, curve=curve) as client:
            client.call(MsgType.PING, {"note": SECRET_TEXT.decode()}, [SECRET_TEXT])
    finally:
        tap.close()
    return bytes(tap.seen)


def test_the_bytes_on_the_wire_are_not_plaintext(curve_server: RpcServer, plain_server: RpcServer) -> None:
    # the same request and reply, captured between client and server: in the clear without
    # CURVE (the capture works), and nowhere in the bytes with it
    plain = _captured(plain_server, None)
    assert SECRET_TEXT in plain and b'"note"' in plain
    encrypted = _captured(curve_server, KEYS.client())
    assert b"CURVE" in encrypted and len(encrypted) > 2 * len(SECRET_TEXT)
    assert SECRET_TEXT not in encrypted and b'"note"' not in encrypted and b"CRPR" not in encrypted


def test_the_documented_derivation_and_test_vector_hold() -> None:
    import blake3

    doc = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    context = "croupier 2026-12-01 curve server secret v1"
    assert f'context = "{context}"' in doc
    derived = blake3.blake3(bytes(range(32)), derive_key_context=context).digest()
    assert derived.hex() in doc and z85.encode(derived).decode() in doc
    public = zmq.curve_public(z85.encode(derived))
    assert public == KEYS.public and public.decode() in doc
