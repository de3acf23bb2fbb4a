"""transports.auth: the auth frame, its MAC, the nonce window and memory, and the RpcServer hook."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from croupier.core.access import Scheme
from croupier.core.errors import Unauthorized
from croupier.core.wire import Header, Kind, MsgType, encode_body
from croupier.transports.auth import (
    AUTH_FLAG,
    Signer,
    Verifier,
    auth_mac,
    request_frames,
    sign_request,
)
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer
from croupier.transports.secret import ClusterSecret

SECRET = ClusterSecret(bytes(range(32)))
OTHER = ClusterSecret(bytes(32))


def test_the_protocol_doc_test_vector() -> None:
    # PROTOCOL.md §2.1 prints these bytes: a client in another language checks itself against them
    assert SECRET.member_key.hex() == "4db1898ce0ff62db39dce1509bca0acea0429c57d03aa26118508800078b8a40"
    key = SECRET.app_key("app-1")
    assert key.hex() == "6cb815e17a5ff22b88e33b44cd7ffce12c2ff64454257cf0512c7203f26a3bf4"
    header = Header(Kind.REQUEST, MsgType.GET_SHUFFLE, 7, flags=AUTH_FLAG).encode()
    assert header.hex(" ") == "43 52 50 52 01 00 24 00 07 00 00 00 00 00 00 00 00 00 01 00"
    body = b'{"app_id":"app-1","shuffle_id":0}'
    prefix = bytes.fromhex("0200000000000000") + (1_764_547_200_000_000).to_bytes(8, "little")
    assert prefix.hex(" ") == "02 00 00 00 00 00 00 00 00 a0 0b a9 d8 44 06 00"
    mac = auth_mac(key, header, prefix, body, None)
    assert mac.hex() == "32f85f97936f2a7db7a19a04c675d37c3aab5db60f0458d2617676d866d66215"


def _signed(
    signer: Signer, msg_type: int, body: dict[str, Any], payloads: tuple[bytes, ...] = ()
) -> tuple[bytes, bytes, bytes | None, list[bytes]]:
    frames = request_frames(signer, msg_type, 1, body, encode_body(body), payloads)
    header, data = bytes(frames[0]), bytes(frames[1])
    if Header.decode(header).flags & AUTH_FLAG:
        return header, data, bytes(frames[2]), [bytes(f) for f in frames[3:]]
    return header, data, None, [bytes(f) for f in frames[2:]]


def _check(verifier: Verifier, msg_type: int, body: dict[str, Any], parts: Any) -> Scheme:
    header, data, auth, payloads = parts
    return verifier.check(msg_type, header, body, data, auth, payloads)


def test_member_and_app_signatures_verify() -> None:
    verifier = Verifier(SECRET)
    member = Signer.member(SECRET)
    assert member is not None
    body = {"app_id": "a1", "shuffle_id": 0}
    assert _check(verifier, MsgType.DESTROY, body, _signed(member, MsgType.DESTROY, body)) is Scheme.MEMBER
    app = Signer()
    app.add_app("a1", SECRET.app_key("a1"))
    parts = _signed(app, MsgType.PUSH, body, (b"headers", b"data"))
    assert _check(verifier, MsgType.PUSH, body, parts) is Scheme.APP


def test_refusals() -> None:
    verifier = Verifier(SECRET)
    body = {"app_id": "a1", "shuffle_id": 0}
    with pytest.raises(Unauthorized):  # unsigned
        _check(verifier, MsgType.PUSH, body, _signed(Signer(), MsgType.PUSH, body))
    assert _check(verifier, MsgType.STATUS, {}, _signed(Signer(), MsgType.STATUS, {})) is Scheme.NONE
    app = Signer()
    app.add_app("a1", SECRET.app_key("a1"))
    with pytest.raises(Unauthorized):  # an app may not send a member's message
        _check(verifier, MsgType.DESTROY, body, _signed(app, MsgType.DESTROY, body))
    parts = _signed(app, MsgType.PUSH, body)
    with pytest.raises(Unauthorized):  # another app's key
        _check(verifier, MsgType.PUSH, {**body, "app_id": "a2"}, parts)
    wrong = Signer.member(OTHER)
    assert wrong is not None
    with pytest.raises(Unauthorized):  # another cluster's secret
        _check(verifier, MsgType.DESTROY, body, _signed(wrong, MsgType.DESTROY, body))


def test_tampering_with_any_covered_byte_is_refused() -> None:
    app = Signer()
    app.add_app("a1", SECRET.app_key("a1"))
    body = {"app_id": "a1", "shuffle_id": 0}
    header, data, auth, payloads = _signed(app, MsgType.PUSH, body, (b"headers", b"data"))
    assert auth is not None
    flipped = [
        (header[:8] + bytes([header[8] ^ 1]) + header[9:], data, auth, payloads),  # request id
        (header, data.replace(b"0", b"1"), auth, payloads),
        (header, data, auth[:10] + bytes([auth[10] ^ 1]) + auth[11:], payloads),  # nonce
        (header, data, auth[:40] + bytes(8), payloads),
        (header, data, auth, [b"HEADERS", payloads[1]]),
    ]
    for parts in flipped:
        with pytest.raises(Unauthorized):
            _check(Verifier(SECRET), MsgType.PUSH, body, parts)


def test_replays_and_old_nonces_are_refused() -> None:
    verifier = Verifier(SECRET)
    member = Signer.member(SECRET)
    assert member is not None
    parts = _signed(member, MsgType.DESTROY, {"app_id": "a1"})
    _check(verifier, MsgType.DESTROY, {"app_id": "a1"}, parts)
    with pytest.raises(Unauthorized):
        _check(verifier, MsgType.DESTROY, {"app_id": "a1"}, parts)
    late = Verifier(SECRET, clock=lambda: 10_000_000_000.0)  # the server's clock is far ahead
    with pytest.raises(Unauthorized):
        _check(late, MsgType.DESTROY, {"app_id": "a1"}, _signed(member, MsgType.DESTROY, {"app_id": "a1"}))


def test_nonce_memory_is_bounded_per_identity() -> None:
    now = [1_000.0]
    verifier = Verifier(SECRET, max_nonces=10, clock=lambda: now[0])
    key = SECRET.member_key
    header = Header(Kind.REQUEST, MsgType.DESTROY, 1, flags=AUTH_FLAG).encode()
    body = {"app_id": "a1"}
    data = encode_body(body)

    def frame(nonce: int) -> bytes:
        prefix = bytes([1]) + bytes(7) + nonce.to_bytes(8, "little")
        return prefix + auth_mac(key, header, prefix, data, None)

    base = 1_000 * 1_000_000
    for n in range(100):
        verifier.check(MsgType.DESTROY, header, body, data, frame(base + n), [])
    with pytest.raises(Unauthorized):  # forgotten, but below the floor: still refused
        verifier.check(MsgType.DESTROY, header, body, data, frame(base + 5), [])
    now[0] += 1_000  # everything leaves the window; the next sweep forgets the identity
    for n in itertools.islice(itertools.count(), 4096):
        verifier.check(MsgType.DESTROY, header, body, data, frame(base + 1_000_000_000 + n), [])
    assert verifier.identities() == 1


def test_sign_request_makes_strictly_increasing_nonces() -> None:
    header = Header(Kind.REQUEST, MsgType.PING, 1, flags=AUTH_FLAG).encode()
    nonces = [
        int.from_bytes(sign_request(1, bytes(32), header, b"{}", None)[8:16], "little") for _ in range(1000)
    ]
    assert nonces == sorted(set(nonces))


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.term()


def test_the_server_refuses_before_dispatch(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    seen: list[Request] = []

    def handler(request: Request, responder: Responder) -> None:
        seen.append(request)
        responder.ok({"payloads": len(request.payloads)}, [])

    server = RpcServer("inproc://auth", handler, context=ctx, verifier=Verifier(SECRET))
    server.start()
    clients = [
        RpcClient(server.url, context=ctx, timeout=5, retries=0, signer=s)
        for s in (None, Signer.member(SECRET), Signer.member(OTHER))
    ]
    try:
        with pytest.raises(Unauthorized):
            clients[0].call(MsgType.DESTROY, {"app_id": "a1"})
        assert clients[1].call(MsgType.DESTROY, {"app_id": "a1"}, [b"x", b"y"]).body == {"payloads": 2}
        with pytest.raises(Unauthorized):
            clients[2].call(MsgType.DESTROY, {"app_id": "a1"})
        assert clients[0].call(MsgType.STATUS).body == {"payloads": 0}
        assert [r.scheme for r in seen] == [Scheme.MEMBER, Scheme.NONE]
        assert server.stats.unauthorized == 2
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_a_server_without_a_secret_takes_signed_requests_too(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    def handler(request: Request, responder: Responder) -> None:
        responder.ok({"payloads": [bytes(p).decode() for p in request.payloads]}, [])

    server = RpcServer("inproc://open", handler, context=ctx)
    server.start()
    client = RpcClient(server.url, context=ctx, timeout=5, retries=0, signer=Signer.member(SECRET))
    try:
        assert client.call(MsgType.DESTROY, {"app_id": "a1"}, [b"x"]).body == {"payloads": ["x"]}
    finally:
        client.close()
        server.stop()


def test_protocol_doc_prints_the_vector_and_the_access_table() -> None:
    import re
    from pathlib import Path

    from croupier.core.access import ACCESS, Access

    doc = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()
    section = doc[doc.index("### 2.1 Authentication") : doc.index("## 3. Error codes")]
    for text in (
        SECRET.member_key.hex(),
        SECRET.app_key("app-1").hex(),
        "43 52 50 52 01 00 24 00 07 00 00 00 00 00 00 00 00 00 01 00",
        "02 00 00 00 00 00 00 00 00 a0 0b a9 d8 44 06 00",
        "32f85f97936f2a7db7a19a04c675d37c3aab5db60f0458d2617676d866d66215",
    ):
        assert text in section, text
    documented: dict[str, Access] = {}
    for level, names in re.findall(r"^\| (open|app|member) \| [^|]+ \| ([^|]+) \|$", section, re.M):
        for name in re.findall(r"`([A-Z_]+)`", names):
            documented[name] = Access[level.upper()]
    assert documented == {MsgType(t).name: a for t, a in ACCESS.items()}


def test_two_processes_of_one_app_may_draw_the_same_microsecond() -> None:
    # nonces come from each process's clock: equal ones of different requests are no replay
    verifier = Verifier(SECRET, clock=lambda: 1_000.0)
    key = SECRET.app_key("a1")
    body = {"app_id": "a1", "shuffle_id": 0}
    data = encode_body(body)
    prefix = bytes([2]) + bytes(7) + (1_000 * 1_000_000).to_bytes(8, "little")
    frames = []
    for request_id in (1, 2):  # two clients' first requests, at the same microsecond
        header = Header(Kind.REQUEST, MsgType.GET_SHUFFLE, request_id, flags=AUTH_FLAG).encode()
        frames.append((header, prefix + auth_mac(key, header, prefix, data, None)))
    for header, auth in frames:
        assert verifier.check(MsgType.GET_SHUFFLE, header, body, data, auth, []) is Scheme.APP
    with pytest.raises(Unauthorized):  # the very same request again is a replay
        verifier.check(MsgType.GET_SHUFFLE, frames[0][0], body, data, frames[0][1], [])


def _app_signed(msg_type: int, body: dict[str, Any], app_id: str) -> tuple[bytes, bytes, bytes]:
    """A request signed with ``app_id``'s valid key, whatever its body says (a client that signs all)."""
    header = Header(Kind.REQUEST, msg_type, 11, flags=AUTH_FLAG).encode()
    data = encode_body(body)
    return header, data, sign_request(Scheme.APP, SECRET.app_key(app_id), header, data, None)


def test_an_app_signed_open_message_without_an_app_id_is_served_unsigned() -> None:
    # issue 22 §3.1: PING and STATUS have no app_id, so an app-signed one used to be refused
    verifier = Verifier(SECRET)
    for msg_type in (MsgType.PING, MsgType.STATUS, MsgType.REGISTER_APP):
        body: dict[str, Any] = {"name": "x"} if msg_type == MsgType.REGISTER_APP else {}
        header, data, auth = _app_signed(msg_type, body, "a1")
        assert verifier.check(msg_type, header, body, data, auth, []) is Scheme.NONE
    # an app message still needs the app_id its key belongs to
    header, data, auth = _app_signed(MsgType.GET_SHUFFLE, {"shuffle_id": 0}, "a1")
    with pytest.raises(Unauthorized):
        verifier.check(MsgType.GET_SHUFFLE, header, {"shuffle_id": 0}, data, auth, [])


def test_unauthorized_replies_say_why_in_a_few_fixed_words() -> None:
    # issue 22 §3.7: clock skew used to look exactly like a wrong key
    member = Signer.member(SECRET)
    wrong = Signer.member(OTHER)
    assert member is not None and wrong is not None
    body = {"app_id": "a1"}

    def reason(verifier: Verifier, msg_type: int, parts: Any) -> str:
        with pytest.raises(Unauthorized) as info:
            _check(verifier, msg_type, body, parts)
        return str(info.value.details["reason"])

    late = Verifier(SECRET, clock=lambda: 10_000_000_000.0)
    assert reason(late, MsgType.DESTROY, _signed(member, MsgType.DESTROY, body)) == "nonce outside the window"
    verifier = Verifier(SECRET)
    parts = _signed(member, MsgType.DESTROY, body)
    _check(verifier, MsgType.DESTROY, body, parts)
    assert reason(verifier, MsgType.DESTROY, parts) == "replayed nonce"
    assert reason(verifier, MsgType.DESTROY, _signed(wrong, MsgType.DESTROY, body)) == "bad signature"
    assert reason(verifier, MsgType.DESTROY, _signed(Signer(), MsgType.DESTROY, body)) == "signature required"
    header, data, auth = _app_signed(MsgType.DESTROY, body, "a1")
    assert reason(verifier, MsgType.DESTROY, (header, data, auth, [])) == "member signature required"
    header, data, member_auth, _ = _signed(member, MsgType.DESTROY, body)
    assert member_auth is not None
    assert reason(verifier, MsgType.DESTROY, (header, data, member_auth[:47], [])) == "malformed auth frame"
    # a wrong key never learns about the window: the MAC is judged first
    assert reason(late, MsgType.DESTROY, _signed(wrong, MsgType.DESTROY, body)) == "bad signature"


def test_the_server_sends_the_reason_and_only_the_reason(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    def handler(request: Request, responder: Responder) -> None:
        responder.ok({}, [])

    server = RpcServer(
        "inproc://reasons", handler, context=ctx, verifier=Verifier(SECRET, clock=lambda: 10_000_000_000.0)
    )
    server.start()
    client = RpcClient(server.url, context=ctx, timeout=5, retries=0, signer=Signer.member(SECRET))
    try:
        with pytest.raises(Unauthorized) as info:
            client.call(MsgType.DESTROY, {"app_id": "a1"})
        assert info.value.details == {"reason": "nonce outside the window"}
        assert info.value.message == "DESTROY(55) refused: nonce outside the window"
    finally:
        client.close()
        server.stop()


def _raw_call(ctx: zmq.Context[zmq.Socket[bytes]], url: str, frames: list[bytes]) -> list[bytes]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(url)
    try:
        sock.send_multipart(frames)
        assert sock.poll(5000), "no reply"
        return sock.recv_multipart()
    finally:
        sock.close()


def test_an_auth_flag_without_an_auth_frame_is_unauthorized(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    # issue 22 §3.4: a missing credential is UNAUTHORIZED (it was BAD_REQUEST); without a
    # secret the flag is ignored like any auth frame
    import json

    def handler(request: Request, responder: Responder) -> None:
        responder.ok({"served": True}, [])

    header = Header(Kind.REQUEST, MsgType.PING, 5, flags=AUTH_FLAG).encode()
    secure = RpcServer("inproc://noframe", handler, context=ctx, verifier=Verifier(SECRET))
    plain = RpcServer("inproc://noframe-plain", handler, context=ctx)
    secure.start()
    plain.start()
    try:
        reply = _raw_call(ctx, secure.url, [header, b"{}"])
        head = Header.decode(reply[0])
        assert (head.kind, head.msg_type, head.request_id, head.status) == (Kind.REPLY, MsgType.PING, 5, 18)
        assert json.loads(reply[1])["details"] == {"reason": "malformed auth frame"}
        reply = _raw_call(ctx, plain.url, [header, b"{}"])
        assert Header.decode(reply[0]).status == 0 and json.loads(reply[1]) == {"served": True}
    finally:
        secure.stop()
        plain.stop()


def test_replies_carry_no_auth_frame_and_their_flags_are_ignored() -> None:
    # issue 22 §3.5: a reply's frame 2 is its first payload, whatever its flags say
    from croupier.transports._framing import parse_message, reply_frames

    sent = reply_frames(MsgType.FETCH_CHUNK, 3, 0, b"{}", [b"chunk"])
    assert Header.decode(sent[0]).flags == 0
    flagged = Header(Kind.REPLY, MsgType.FETCH_CHUNK, 3, flags=AUTH_FLAG).encode()
    parsed = parse_message([memoryview(flagged), memoryview(b"{}"), memoryview(b"chunk")], Kind.REPLY)
    assert [bytes(p) for p in parsed.payloads] == [b"chunk"] and parsed.auth is None
