"""Hostile input: the RPC server answers BAD_REQUEST where it can, and never dies.

Also the client side: a server that replies with garbage does not confuse RpcClient.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.core.errors import BadRequest, RequestTimeout
from croupier.core.wire import MAGIC, Header, Kind, MsgType
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer

_Ctx = zmq.Context[zmq.Socket[bytes]]
_Sock = zmq.Socket[bytes]
ALLOWED = (MsgType.PING, MsgType.STATUS)


@pytest.fixture
def ctx() -> Iterator[_Ctx]:
    context: _Ctx = zmq.Context()
    yield context
    leaked = [s for s in list(getattr(context, "_sockets", ())) if not s.closed]
    for s in leaked:
        s.close(linger=0)
    context.term()
    assert not leaked, f"sockets left open: {leaked}"


def echo(request: Request, responder: Responder) -> None:
    responder.ok({"echo": request.body}, request.payloads)


@pytest.fixture
def server(ctx: _Ctx) -> Iterator[RpcServer]:
    # over the 16 MiB body limit but under the frame limit: the body check answers BAD_REQUEST
    big = 64 * 1024 * 1024
    with RpcServer(
        "tcp://127.0.0.1:0", echo, context=ctx, name="garbage", allowed_types=ALLOWED, max_message_bytes=big
    ) as srv:
        yield srv


@pytest.fixture
def dealer(ctx: _Ctx, server: RpcServer) -> Iterator[_Sock]:
    sock: _Sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.url)
    yield sock
    sock.close(linger=0)


def roundtrip(sock: _Sock, frames: list[bytes], wait: float = 5.0) -> list[bytes] | None:
    sock.send_multipart(frames, copy=False)
    if not sock.poll(int(wait * 1000), zmq.POLLIN):
        return None
    return sock.recv_multipart()


def assert_bad_request(reply: list[bytes] | None, msg_type: int = 0, request_id: int = 0) -> None:
    assert reply is not None, "no reply to a malformed request"
    assert len(reply) == 2
    header = Header.decode(reply[0])
    assert header.kind == Kind.REPLY
    assert header.status == BadRequest.status
    assert (header.msg_type, header.request_id) == (msg_type, request_id)
    body = json.loads(reply[1])
    assert body["code"] == "BAD_REQUEST"
    assert isinstance(body["message"], str)
    assert body["message"]


def assert_still_serving(server: RpcServer, ctx: _Ctx) -> None:
    with RpcClient(server.url, context=ctx, timeout=5, retries=0) as client:
        assert client.call(MsgType.PING, {"alive": True}).body == {"echo": {"alive": True}}


def raw_header(
    *,
    magic: bytes = MAGIC,
    version: int = 1,
    kind: int = 0,
    msg_type: int = MsgType.PING,
    request_id: int = 7,
    status: int = 0,
    flags: int = 0,
) -> bytes:
    return struct.pack("<4sBBHQHH", magic, version, kind, msg_type, request_id, status, flags)


GOOD = raw_header()

# (frames, (msg_type, request_id) the BAD_REQUEST reply must echo)
MALFORMED: dict[str, tuple[list[bytes], tuple[int, int]]] = {
    "random single frame": (
        [b"\x9a\x13random bytes that are not a header\x00\xff"],
        (0, 0),
    ),
    "empty single frame": ([b""], (0, 0)),
    "header only": ([GOOD], (MsgType.PING, 7)),
    "truncated header": ([GOOD[:11], b"{}"], (0, 0)),
    "header one byte long": ([GOOD + b"\x00", b"{}"], (0, 0)),
    "wrong magic": ([raw_header(magic=b"HTTP"), b"{}"], (0, 0)),
    "wrong version": ([raw_header(version=2), b"{}"], (MsgType.PING, 7)),
    "version zero": ([raw_header(version=0), b"{}"], (MsgType.PING, 7)),
    "kind reply": ([raw_header(kind=1), b"{}"], (MsgType.PING, 7)),
    "unknown kind": ([raw_header(kind=9), b"{}"], (MsgType.PING, 7)),
    "flag bit 1 set": ([raw_header(flags=2), b"{}"], (MsgType.PING, 7)),
    "every flag bit set": ([raw_header(flags=0xFFFF), b"{}", b"\x00" * 48], (MsgType.PING, 7)),
    "status in a request": ([raw_header(status=5), b"{}"], (MsgType.PING, 7)),
    "non-JSON body": ([GOOD, b"{not json"], (MsgType.PING, 7)),
    "invalid UTF-8 body": ([GOOD, b"\xff\xfe{}"], (MsgType.PING, 7)),
    "empty body": ([GOOD, b""], (MsgType.PING, 7)),
    "JSON array body": ([GOOD, b"[1, 2, 3]"], (MsgType.PING, 7)),
    "JSON string body": ([GOOD, b'"hello"'], (MsgType.PING, 7)),
    "JSON null body": ([GOOD, b"null"], (MsgType.PING, 7)),
    "unterminated body": ([GOOD, b"{"], (MsgType.PING, 7)),
    "deeply nested body": ([GOOD, b"[" * 100_000 + b"]" * 100_000], (MsgType.PING, 7)),
    "unknown msg_type": ([raw_header(msg_type=999, request_id=2**64 - 1), b"{}"], (999, 2**64 - 1)),
    "body over 16 MiB": ([GOOD, b'{"x": "' + b"a" * (17 * 1024 * 1024) + b'"}'], (MsgType.PING, 7)),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_gets_bad_request(server: RpcServer, dealer: _Sock, ctx: _Ctx, case: str) -> None:
    frames, ids = MALFORMED[case]
    assert_bad_request(roundtrip(dealer, frames), *ids)
    assert server.stats.bad_requests == 1
    assert server.stats.requests == 1
    assert_still_serving(server, ctx)
    assert server.stats.bad_requests == 1


def test_every_bad_request_is_counted_and_logged(
    server: RpcServer, dealer: _Sock, ctx: _Ctx, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="croupier.transports.rpc"):
        for frames, ids in MALFORMED.values():
            assert_bad_request(roundtrip(dealer, frames), *ids)
    assert server.stats.bad_requests == len(MALFORMED)
    warnings = [r.getMessage() for r in caplog.records if "BAD_REQUEST" in r.getMessage()]
    assert warnings  # rate-limited: at least the first burst is logged with its reason
    assert any("magic" in w for w in warnings)
    assert_still_serving(server, ctx)


# -- random frames (hypothesis) -------------------------------------------------


def expected_reply(frames: list[bytes]) -> tuple[int, int, bool]:
    """An independent oracle: the ids the reply must carry, and whether it is OK."""
    head = frames[0]
    ids = (0, 0)
    if len(head) == 20 and head[:4] == MAGIC:
        ids = struct.unpack_from("<HQ", head, 6)
    ok = False
    if len(frames) >= 2 and len(head) == 20:
        magic, version, kind, msg_type, _, _, _ = struct.unpack("<4sBBHQHH", head)
        if magic == MAGIC and version == 1 and kind == 0 and msg_type in ALLOWED:
            try:
                ok = isinstance(json.loads(frames[1].decode("utf-8")), dict)
            except ValueError:  # UnicodeDecodeError is a ValueError too
                ok = False
    return ids[0], ids[1], ok


headers = st.builds(
    raw_header,
    magic=st.sampled_from([MAGIC, b"CRPX", b"\x00\x00\x00\x00"]),
    version=st.sampled_from([0, 1, 1, 2, 255]),
    kind=st.sampled_from([0, 0, 1, 2, 255]),
    msg_type=st.sampled_from([*ALLOWED, 0, 999, 65535]),
    request_id=st.integers(0, 2**64 - 1),
)
bodies = st.one_of(
    st.just(b"{}"),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3).map(lambda d: json.dumps(d).encode()),
    st.sampled_from([b"[]", b"1", b'"s"', b"null", b"{", b"\xff", b""]),
    st.binary(max_size=64),
)
head_frames = st.one_of(headers, st.binary(max_size=40), headers.map(lambda h: h[:-1]))
messages = st.tuples(head_frames, st.lists(st.one_of(bodies, st.binary(max_size=256)), max_size=6)).map(
    lambda t: [t[0], *t[1]]
)


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(frames=messages)
def test_random_frames_never_break_the_server(server: RpcServer, dealer: _Sock, frames: list[bytes]) -> None:
    bad_before = server.stats.bad_requests
    reply = roundtrip(dealer, frames)
    msg_type, request_id, ok = expected_reply(frames)
    assert reply is not None
    header = Header.decode(reply[0])
    assert header.kind == Kind.REPLY
    assert (header.msg_type, header.request_id) == (msg_type, request_id)
    if ok:
        assert header.status == 0
        assert json.loads(reply[1]) == {"echo": json.loads(frames[1])}
        assert reply[2:] == frames[2:]
        assert server.stats.bad_requests == bad_before
    else:
        assert header.status == BadRequest.status
        assert json.loads(reply[1])["code"] == "BAD_REQUEST"
        assert server.stats.bad_requests == bad_before + 1


def test_random_frames_leave_the_server_serving(server: RpcServer, ctx: _Ctx) -> None:
    # Runs after the hypothesis test in file order, but also stands alone.
    with ctx.socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.url)
        for n in range(50):
            frames = [os.urandom(n % 23) for _ in range(1 + n % 5)]
            assert roundtrip(sock, frames) is not None
    assert_still_serving(server, ctx)


# -- below the ZeroMQ layer -----------------------------------------------------


def _tcp_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        os.urandom(1),
        os.urandom(4096),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        # A ZMTP 3.0 signature followed by nonsense: passes the first handshake step.
        b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL" + b"\x00" * 16 + os.urandom(512),
    ],
    ids=["nothing", "one byte", "random 4 KiB", "http", "zmtp greeting then junk"],
)
def test_raw_tcp_garbage_is_dropped(server: RpcServer, ctx: _Ctx, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", _tcp_port(server.url)), timeout=5) as conn:
        # With a ZAP domain set, libzmq hangs up on a peer that is not ZMTP 3 at once (such a
        # peer could not be put to ZAP): the hang-up may come before the payload is all sent.
        with contextlib.suppress(OSError):
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
        conn.settimeout(2)
        try:
            while conn.recv(4096):  # libzmq's greeting, then it hangs up
                pass
        except (TimeoutError, ConnectionResetError):
            pass
    assert_still_serving(server, ctx)
    # libzmq also speaks ZMTP 1.0, so random bytes may be parsed into messages;
    # everything but assert_still_serving's call must then be a BAD_REQUEST.
    assert server.stats.requests == server.stats.bad_requests + 1


def test_zmq_stream_socket_garbage(server: RpcServer, ctx: _Ctx) -> None:
    with ctx.socket(zmq.STREAM) as stream:
        stream.setsockopt(zmq.LINGER, 0)
        stream.connect(server.url)
        # A STREAM socket needs the peer's routing id; the first received message carries it.
        assert stream.poll(5000, zmq.POLLIN)
        routing_id = stream.recv_multipart()[0]
        for _ in range(10):
            stream.send_multipart([routing_id, os.urandom(300)])
    assert_still_serving(server, ctx)


def test_oversized_frame_is_refused_without_harm(server: RpcServer, dealer: _Sock, ctx: _Ctx) -> None:
    huge = bytes(100 * 1024 * 1024)
    reply = roundtrip(dealer, [GOOD, b"{}", huge], wait=3.0)
    # libzmq drops the connection on a frame over MAXMSGSIZE; a BAD_REQUEST would do too.
    if reply is not None:
        assert_bad_request(reply, MsgType.PING, 7)
    assert_still_serving(server, ctx)
    # The dealer reconnects by itself and is served again.
    assert roundtrip(dealer, [raw_header(request_id=8), b"{}"]) is not None


def test_oversized_frame_under_a_small_limit(ctx: _Ctx) -> None:
    with RpcServer("tcp://127.0.0.1:0", echo, context=ctx, max_message_bytes=1024) as small:
        with RpcClient(small.url, context=ctx, timeout=0.5, retries=0) as client:
            assert client.call(MsgType.PING, {}, [b"x" * 512]).payloads[0] == b"x" * 512
            with pytest.raises(RequestTimeout):
                client.call(MsgType.PING, {}, [b"x" * 4096])
            assert client.call(MsgType.PING).body == {"echo": {}}
        assert small.stats.requests == 2


# -- a hostile server ---------------------------------------------------------------


def test_client_ignores_garbage_replies(ctx: _Ctx) -> None:
    router: _Sock = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:0")
    url = router.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(url, bytes)

    def fake_server() -> None:
        # The socket moves to this thread (Thread.start is a full memory barrier).
        try:
            if not router.poll(5000, zmq.POLLIN):
                return
            peer, head, _body = router.recv_multipart()
            request_id = Header.decode(head).request_id
            reply = Header(Kind.REPLY, MsgType.PING, request_id).encode()
            router.send_multipart([peer, b"junk"])
            router.send_multipart([peer, Header(Kind.REPLY, MsgType.PING, request_id + 1).encode(), b"{}"])
            router.send_multipart([peer, Header(Kind.REQUEST, MsgType.PING, request_id).encode(), b"{}"])
            router.send_multipart([peer, reply, b'{"real": true}', b"payload"])
        finally:
            router.close(linger=0)

    thread = threading.Thread(target=fake_server)
    thread.start()
    try:
        with RpcClient(url.decode(), context=ctx, timeout=5, retries=0) as client:
            reply = client.call(MsgType.PING)
        assert reply.body == {"real": True}
        assert [bytes(p) for p in reply.payloads] == [b"payload"]
    finally:
        thread.join()
