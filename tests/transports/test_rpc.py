"""RpcServer and RpcClient over tcp and inproc: round trips, threads, errors, timeouts."""

from __future__ import annotations

import logging
import queue
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import zmq

from croupier.core.errors import (
    BY_STATUS,
    BadRequest,
    Congested,
    CroupierError,
    DataLostError,
    InternalError,
    NotLeader,
    RequestTimeout,
    Unavailable,
)
from croupier.core.wire import MsgType
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    # term() would hang on a socket left open; fail loudly instead.
    leaked = [s for s in list(getattr(context, "_sockets", ())) if not s.closed]
    for s in leaked:
        s.close(linger=0)
    context.term()
    assert not leaked, f"sockets left open: {leaked}"


class Rpc:
    """Builds servers and clients on one context and closes them all at teardown."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, stack: ExitStack) -> None:
        self.ctx = ctx
        self.endpoint = endpoint
        self._stack = stack

    def server(self, handler: Callable[[Request, Responder], None], **kwargs: Any) -> RpcServer:
        server = RpcServer(self.endpoint, handler, context=self.ctx, **kwargs)
        self._stack.callback(server.stop)
        server.start()
        return server

    def client(self, url: str, **kwargs: Any) -> RpcClient:
        client = RpcClient(url, context=self.ctx, **kwargs)
        self._stack.callback(client.close)
        return client


@pytest.fixture(params=["tcp", "inproc"])
def rpc(request: pytest.FixtureRequest, ctx: zmq.Context[zmq.Socket[bytes]]) -> Iterator[Rpc]:
    endpoint = "tcp://127.0.0.1:0" if request.param == "tcp" else f"inproc://rpc-{uuid.uuid4().hex}"
    with ExitStack() as stack:
        yield Rpc(ctx, endpoint, stack)


@pytest.fixture
def tcp(ctx: zmq.Context[zmq.Socket[bytes]]) -> Iterator[Rpc]:
    with ExitStack() as stack:
        yield Rpc(ctx, "tcp://127.0.0.1:0", stack)


def echo(request: Request, responder: Responder) -> None:
    responder.ok({"echo": request.body, "type": request.msg_type, "id": request.request_id}, request.payloads)


# -- round trips ---------------------------------------------------------------


def test_port_zero_gives_a_real_url(tcp: Rpc) -> None:
    server = tcp.server(echo)
    match = re.fullmatch(r"tcp://127\.0\.0\.1:(\d+)", server.url)
    assert match is not None
    port = int(match.group(1))
    assert port > 0
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_echo_round_trip_small_and_large_payloads(rpc: Rpc) -> None:
    server = rpc.server(echo)
    client = rpc.client(server.url, timeout=5)
    big = bytes(range(256)) * 4096  # 1 MiB, sent zero-copy
    reply = client.call(MsgType.PING, {"a": 1, "b": [1, "x"]}, [b"small", b"", big, memoryview(b"mv")])
    assert reply.body["echo"] == {"a": 1, "b": [1, "x"]}
    assert reply.body["type"] == MsgType.PING
    assert all(isinstance(p, memoryview) for p in reply.payloads)
    assert [bytes(p) for p in reply.payloads] == [b"small", b"", big, b"mv"]


def test_empty_body_and_no_payloads(rpc: Rpc) -> None:
    server = rpc.server(echo)
    reply = rpc.client(server.url, timeout=5).call(MsgType.STATUS)
    assert reply.body["echo"] == {}
    assert reply.payloads == []


def test_many_sequential_calls_use_fresh_ids(rpc: Rpc) -> None:
    server = rpc.server(echo)
    client = rpc.client(server.url, timeout=5)
    ids = [client.call(MsgType.PING, {"i": i}).body["id"] for i in range(300)]
    assert len(set(ids)) == 300
    assert 0 not in ids
    assert ids == sorted(ids)
    assert server.stats.requests == 300
    assert server.stats.replies == 300


def _hammer(call: Callable[[int], dict[str, Any]], worker: int, out: list[str]) -> None:
    try:
        for i in range(100):
            body = call(i)
            if body["echo"] != {"worker": worker, "i": i}:
                out.append(f"worker {worker} got {body} for {i}")
    except Exception as exc:
        out.append(repr(exc))


def test_concurrent_calls_share_one_client(rpc: Rpc) -> None:
    server = rpc.server(echo)
    client = rpc.client(server.url, timeout=5)
    failures: list[str] = []
    threads = [
        threading.Thread(
            target=_hammer,
            args=(lambda i, w=w: client.call(MsgType.PING, {"worker": w, "i": i}).body, w, failures),
        )
        for w in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert server.stats.requests == 400


def test_concurrent_calls_from_separate_clients(rpc: Rpc) -> None:
    server = rpc.server(echo)
    clients = [rpc.client(server.url, timeout=5) for _ in range(4)]
    failures: list[str] = []
    threads = [
        threading.Thread(
            target=_hammer,
            args=(lambda i, w=w: clients[w].call(MsgType.PING, {"worker": w, "i": i}).body, w, failures),
        )
        for w in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert server.stats.requests == 400


# -- replies from other threads -------------------------------------------------


class WorkerPool:
    """A handler that hands every request to a worker thread, which replies."""

    def __init__(self, work: Callable[[Request, Responder], None]) -> None:
        self._work = work
        self._jobs: queue.Queue[tuple[Request, Responder] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="test-worker")
        self._thread.start()

    def handler(self, request: Request, responder: Responder) -> None:
        self._jobs.put((request, responder))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._work(*job)

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()


@pytest.fixture
def worker_pool() -> Iterator[Callable[[Callable[[Request, Responder], None]], WorkerPool]]:
    pools: list[WorkerPool] = []

    def make(work: Callable[[Request, Responder], None]) -> WorkerPool:
        pools.append(WorkerPool(work))
        return pools[-1]

    yield make
    for pool in pools:
        pool.stop()


def test_reply_from_another_thread(
    rpc: Rpc, worker_pool: Callable[[Callable[[Request, Responder], None]], WorkerPool]
) -> None:
    pool = worker_pool(echo)
    server = rpc.server(pool.handler)
    clients = [rpc.client(server.url, timeout=5) for _ in range(3)]
    for i in range(50):
        for n, client in enumerate(clients):
            reply = client.call(MsgType.PING, {"i": i, "n": n}, [b"p" * (70 * 1024)])
            assert reply.body["echo"] == {"i": i, "n": n}
            assert bytes(reply.payloads[0]) == b"p" * (70 * 1024)
    assert server.stats.replies == 150


def test_error_from_another_thread(
    rpc: Rpc, worker_pool: Callable[[Callable[[Request, Responder], None]], WorkerPool]
) -> None:
    pool = worker_pool(lambda req, resp: resp.error(Congested("slow down", {"wait_ms": 50})))
    server = rpc.server(pool.handler)
    with pytest.raises(Congested) as info:
        rpc.client(server.url, timeout=5).call(MsgType.PING)
    assert info.value.details == {"wait_ms": 50}
    assert server.stats.errors == 1


def test_second_reply_is_ignored_and_logged(rpc: Rpc, caplog: pytest.LogCaptureFixture) -> None:
    finished = threading.Event()

    def twice(request: Request, responder: Responder) -> None:
        responder.ok({"n": 1})
        responder.ok({"n": 2})
        responder.error(BadRequest("late"))
        finished.set()

    server = rpc.server(twice)
    client = rpc.client(server.url, timeout=5)
    with caplog.at_level(logging.WARNING, logger="croupier.transports.rpc"):
        assert client.call(MsgType.PING).body == {"n": 1}
        assert finished.wait(5)
    assert sum("second reply" in r.getMessage() for r in caplog.records) == 2
    assert server.stats.replies == 1
    assert server.stats.bad_requests == 0


# -- errors --------------------------------------------------------------------


def _sample_errors() -> list[CroupierError]:
    errors: list[CroupierError] = [cls(f"{cls.code} happened", {"k": [1, "v"]}) for cls in BY_STATUS.values()]
    errors.append(DataLostError.of([3, 1], ["w1", "w2"], "shuffle 7"))
    errors.append(NotLeader("ask the leader", {"leader": "tcp://10.0.0.1:9000"}))
    return errors


@pytest.mark.parametrize("error", _sample_errors(), ids=repr)
def test_handler_croupier_error_reaches_the_client_intact(tcp: Rpc, error: CroupierError) -> None:
    def fail(request: Request, responder: Responder) -> None:
        raise error

    server = tcp.server(fail)
    with pytest.raises(CroupierError) as info:
        tcp.client(server.url, timeout=5).call(MsgType.PING)
    assert type(info.value) is type(error)
    assert info.value.message == error.message
    assert info.value.details == error.details
    assert info.value.retriable == error.retriable
    if isinstance(error, NotLeader):
        assert isinstance(info.value, NotLeader)
        assert info.value.leader == error.leader


def test_handler_crash_gives_internal_error_and_server_keeps_serving(
    rpc: Rpc, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(request: Request, responder: Responder) -> None:
        if request.body.get("crash"):
            raise ValueError("boom")
        echo(request, responder)

    server = rpc.server(handler)
    client = rpc.client(server.url, timeout=5)
    with caplog.at_level(logging.ERROR, logger="croupier.transports.rpc"):
        for _ in range(3):
            with pytest.raises(InternalError, match="ValueError"):
                client.call(MsgType.PING, {"crash": True})
            assert client.call(MsgType.PING, {"ok": 1}).body["echo"] == {"ok": 1}
    assert server.stats.internal_errors == 3
    assert server.stats.errors == 3
    assert any(r.exc_info is not None and "boom" in str(r.exc_info[1]) for r in caplog.records)


def test_unencodable_reply_body_becomes_internal_error(rpc: Rpc) -> None:
    server = rpc.server(lambda req, resp: resp.ok({"bad": object()}))
    with pytest.raises(InternalError, match="JSON"):
        rpc.client(server.url, timeout=5).call(MsgType.PING)


def test_unencodable_error_details_still_get_a_reply(rpc: Rpc) -> None:
    server = rpc.server(lambda req, resp: resp.error(Congested("busy", {"bad": object()})))
    with pytest.raises(InternalError, match="CONGESTED: busy"):
        rpc.client(server.url, timeout=5).call(MsgType.PING)


def test_error_replies_are_not_retried(rpc: Rpc) -> None:
    def fail(request: Request, responder: Responder) -> None:
        raise Congested("full")

    server = rpc.server(fail)
    with pytest.raises(Congested):
        rpc.client(server.url, timeout=5, retries=3).call(MsgType.PING)
    assert server.stats.requests == 1


def test_disallowed_type_is_a_bad_request(rpc: Rpc) -> None:
    server = rpc.server(echo, allowed_types=[MsgType.PING])
    client = rpc.client(server.url, timeout=5)
    with pytest.raises(BadRequest, match="msg_type 40"):
        client.call(MsgType.STATUS)
    assert client.call(MsgType.PING).body["echo"] == {}
    assert server.stats.bad_requests == 1


# -- timeouts ------------------------------------------------------------------


class Sink:
    """A handler that keeps PING responders without replying; echoes everything else."""

    def __init__(self) -> None:
        self.held: list[Responder] = []

    def __call__(self, request: Request, responder: Responder) -> None:
        if request.msg_type == MsgType.PING:
            self.held.append(responder)
        else:
            echo(request, responder)


def test_no_reply_times_out_after_all_retries(rpc: Rpc) -> None:
    sink = Sink()
    server = rpc.server(sink)
    client = rpc.client(server.url, timeout=0.2, retries=2, retry_backoff=0.01)
    with pytest.raises(RequestTimeout) as info:
        client.call(MsgType.PING)
    message = str(info.value)
    assert server.url in message
    assert "PING" in message
    assert "0.2" in message
    assert info.value.details["tries"] == 3
    assert server.stats.requests == 3  # one request per try, each on a new socket
    # The same client (with a new socket) and other clients still get answers.
    assert client.call(MsgType.STATUS, {"x": 1}).body["echo"] == {"x": 1}
    assert rpc.client(server.url, timeout=5).call(MsgType.STATUS).body["echo"] == {}


def test_per_call_timeout_and_retries_override(rpc: Rpc) -> None:
    server = rpc.server(Sink())
    client = rpc.client(server.url, timeout=30, retries=5)
    with pytest.raises(RequestTimeout):
        client.call(MsgType.PING, timeout=0.1, retries=0)
    assert server.stats.requests == 1


def test_late_reply_goes_to_a_vanished_peer_and_is_counted(tcp: Rpc) -> None:
    sink = Sink()
    server = tcp.server(sink)
    client = tcp.client(server.url, timeout=0.2, retries=0)
    # The client drops a socket that timed out, so once libzmq has seen the
    # disconnect, ROUTER_MANDATORY reports the peer as gone. Before that the reply
    # is accepted and lost; both are fine, so try a few times.
    for attempt in range(20):
        with pytest.raises(RequestTimeout):
            client.call(MsgType.PING)
        time.sleep(0.1)
        sink.held[attempt].ok({"late": True})
        assert client.call(MsgType.STATUS).body["echo"] == {}  # also flushes the late reply
        if server.stats.unroutable:
            break
    assert server.stats.unroutable >= 1
    assert server.stats.dropped == 0


def test_nobody_listening_times_out(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    with (
        RpcClient(url, context=ctx, timeout=0.1, retries=1, retry_backoff=0) as client,
        pytest.raises(RequestTimeout, match=url),
    ):
        client.call(MsgType.PING)


def test_a_server_that_answered_before_is_not_blamed_on_curve(tcp: Rpc) -> None:
    """A timeout names CURVE as a possible cause only while the server never answered: a
    worker that died after serving (a reader's next call) is not a CURVE mismatch."""
    from croupier.transports.async_rpc import AsyncRpcClient

    server = tcp.server(echo)
    url = server.url
    client = tcp.client(url, timeout=0.2, retries=0, retry_backoff=0)
    assert client.call(MsgType.PING).body["echo"] == {}
    replies: queue.Queue[CroupierError | None] = queue.Queue()
    async_client = AsyncRpcClient(context=tcp.ctx)
    async_client.start()
    try:
        async_client.send(url, MsgType.PING, {}, (), lambda _r, e: replies.put(e), timeout=5)
        assert replies.get(timeout=10) is None
        server.stop()
        with pytest.raises(RequestTimeout, match="answered this client before") as caught:
            client.call(MsgType.PING)
        assert "CURVE" not in caught.value.message
        async_client.send(url, MsgType.PING, {}, (), lambda _r, e: replies.put(e), timeout=0.2)
        late = replies.get(timeout=10)
    finally:
        async_client.stop()
    assert isinstance(late, RequestTimeout), late
    assert "answered this client before" in late.message and "CURVE" not in late.message
    never = tcp.client(url, timeout=0.2, retries=0, retry_backoff=0)
    with pytest.raises(RequestTimeout, match=r"never answered this client.*may require CURVE"):
        never.call(MsgType.PING)


# -- lifecycle -----------------------------------------------------------------


def test_server_with_its_own_context() -> None:
    server = RpcServer("tcp://127.0.0.1:0", echo, name="own")
    server.stop()  # before start: a no-op
    server = RpcServer("tcp://127.0.0.1:0", echo, name="own")
    with server:
        assert [t.name for t in threading.enumerate()].count("croupier-own") == 1
        with RpcClient(server.url, timeout=5) as client:  # the shared default context
            assert client.call(MsgType.PING).body["echo"] == {}
    server.stop()
    with pytest.raises(RuntimeError):
        server.start()


def test_url_before_start_raises(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = RpcServer("tcp://127.0.0.1:0", echo, context=ctx).url


def test_bind_conflict_is_unavailable(tcp: Rpc) -> None:
    server = tcp.server(echo)
    other = RpcServer(server.url, echo, context=tcp.ctx)
    with pytest.raises(Unavailable, match="cannot bind"):
        other.start()
    other.stop()


def test_closed_client_raises_unavailable(rpc: Rpc) -> None:
    server = rpc.server(echo)
    client = rpc.client(server.url, timeout=5)
    client.close()
    client.close()
    with pytest.raises(Unavailable, match="closed"):
        client.call(MsgType.PING)


def test_bad_endpoint_is_unavailable(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    with pytest.raises(Unavailable):
        RpcClient("nonsense://here", context=ctx)


@pytest.mark.parametrize(("timeout", "retries"), [(0, 1), (-1.0, 1), (1.0, -1)])
def test_bad_policy_is_rejected(ctx: zmq.Context[zmq.Socket[bytes]], timeout: float, retries: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        RpcClient("tcp://127.0.0.1:1", context=ctx, timeout=timeout, retries=retries)


def test_stop_from_the_handler_is_refused(rpc: Rpc) -> None:
    servers: list[RpcServer] = []

    def handler(request: Request, responder: Responder) -> None:
        servers[0].stop()

    servers.append(rpc.server(handler))
    with pytest.raises(InternalError, match="RuntimeError"):
        rpc.client(servers[0].url, timeout=5).call(MsgType.PING)
