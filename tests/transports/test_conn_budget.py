"""The connection budget and the ZAP handler of RpcServer (issue 13: a server short of
descriptors refuses new connections at the handshake, and serves the ones it has)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from croupier.core.wire import MsgType
from croupier.transports._conn_budget import LEDGER, descriptor_limit
from croupier.transports._zap import ZapHandler, ZapRequest, ZapVerdict
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer

_Ctx = zmq.Context[zmq.Socket[bytes]]


def echo(request: Request, responder: Responder) -> None:
    responder.ok(request.body)


@pytest.fixture
def ctx() -> Iterator[_Ctx]:
    context: _Ctx = zmq.Context()
    yield context
    context.term()


def handshake(ctx: _Ctx, url: str, timeout: float = 5.0) -> tuple[zmq.Socket[bytes], int]:
    """A fresh DEALER and the event that ended its handshake (0: none in time)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        sock.connect(url)
        if monitor.poll(int(timeout * 1000)):
            return sock, int(recv_monitor_message(monitor)["event"])
        return sock, 0
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)


def wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_past_the_budget_a_new_connection_is_refused_and_the_others_are_served(ctx: _Ctx) -> None:
    before = LEDGER.live
    with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="budget") as server:
        LEDGER.reserve = descriptor_limit() - (before + 1)  # room for one connection
        try:
            with RpcClient(server.url, context=ctx, timeout=5.0, retries=0) as first:
                assert first.call(MsgType.PING, {"n": 1}).body == {"n": 1}
                second, event = handshake(ctx, server.url)
                second.close(linger=0)
                assert event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                assert server.connections.refused == 1
                assert first.call(MsgType.PING, {"n": 2}).body == {"n": 2}
            wait_for(lambda: LEDGER.live == before)
            with RpcClient(server.url, context=ctx, timeout=5.0, retries=0) as third:
                assert third.call(MsgType.PING, {"n": 3}).body == {"n": 3}
        finally:
            LEDGER.reserve = None
    assert LEDGER.live == before


def test_a_stopped_server_no_longer_counts_its_connections(ctx: _Ctx) -> None:
    before = LEDGER.live
    server = RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="count")
    server.start()
    socks = [handshake(ctx, server.url)[0] for _ in range(3)]
    wait_for(lambda: server.connections.live == 3)
    assert LEDGER.live == before + 3
    server.stop()
    assert LEDGER.live == before
    for sock in socks:
        sock.close(linger=0)


def test_servers_sharing_a_context_share_one_zap_handler(ctx: _Ctx) -> None:
    with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="a") as a:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="b") as b:
            assert a._zap is b._zap is not None
        # b gave its reference back; a still has a ZAP handler, and serves.
        with RpcClient(a.url, context=ctx, timeout=5.0, retries=0) as client:
            assert client.call(MsgType.PING).body == {}


def test_another_policy_can_share_the_domain(ctx: _Ctx) -> None:
    """The hook for other mechanisms: a policy added to a server's domain is asked too."""
    asked: list[ZapRequest] = []

    def deny(request: ZapRequest) -> ZapVerdict:
        asked.append(request)
        return ZapVerdict(400, "no")

    with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="hook") as server:
        zap = server._zap
        assert zap is not None
        zap.add_policy(server._zap_domain, deny)
        sock, event = handshake(ctx, server.url)
        sock.close(linger=0)
        assert event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        assert asked[0].mechanism == "NULL"
        assert asked[0].domain == server._zap_domain
        zap.remove_policy(server._zap_domain, deny)
        with RpcClient(server.url, context=ctx, timeout=5.0, retries=0) as client:
            assert client.call(MsgType.PING).body == {}


def test_without_a_zap_endpoint_the_server_serves_without_a_budget(ctx: _Ctx) -> None:
    taken = ctx.socket(zmq.ROUTER)
    taken.bind("inproc://zeromq.zap.01")
    try:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="nozap") as server:
            assert server._zap is None
            with RpcClient(server.url, context=ctx, timeout=5.0, retries=0) as client:
                assert client.call(MsgType.PING).body == {}
    finally:
        taken.close(linger=0)


def test_the_handler_is_released_with_its_last_server(ctx: _Ctx) -> None:
    with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, name="x"):
        assert id(ctx) in ZapHandler._by_context
    assert id(ctx) not in ZapHandler._by_context
