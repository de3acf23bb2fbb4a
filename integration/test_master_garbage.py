"""Garbage on the master's port: BAD_REQUEST or a dropped connection, and the master keeps serving."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest
import zmq

from croupier.core import commands as c
from croupier.core.errors import BadRequest, Unauthorized
from croupier.core.wire import HEADER_SIZE, Header, Kind, MsgType
from croupier.transports.master_client import MasterClient
from integration.procs import Proc

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    tmp = tmp_path_factory.mktemp("garbage")
    proc = Proc(["master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp / "data")], tmp / "master.log")
    yield proc
    assert proc.popen.poll() is None, f"the master died:\n{proc.log()}"
    proc.stop()


@pytest.fixture
def dealer(master: Proc) -> Iterator[zmq.Socket[bytes]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(master.url)
    yield sock
    sock.close(0)
    ctx.term()


def still_serving(master: Proc) -> None:
    with MasterClient(master.url, timeout=10, attempts=1) as client:
        assert client.call(c.Ping())["pong"] is True


def reply_status(sock: zmq.Socket[bytes]) -> tuple[Header, dict[str, object]]:
    frames = sock.recv_multipart()
    header = Header.decode(frames[0])
    assert header.kind == Kind.REPLY
    return header, json.loads(frames[1])


def header(msg_type: int = MsgType.STATUS, request_id: int = 7, version: int = 1) -> bytes:
    return Header(Kind.REQUEST, msg_type, request_id, version=version).encode()


CASES: dict[str, list[bytes]] = {
    "random single frame": [os.urandom(37)],
    "random frames": [os.urandom(20), os.urandom(100), os.urandom(3)],
    "truncated header": [header()[:11], b"{}"],
    "header only": [header()],
    "wrong magic": [b"XXXX" + header()[4:], b"{}"],
    "wrong version": [header(version=9), b"{}"],
    "reply kind": [Header(Kind.REPLY, MsgType.STATUS, 7).encode(), b"{}"],
    "unknown type": [header(msg_type=999), b"{}"],
    "not json": [header(), b"\xff\x00not json"],
    "json array": [header(), b"[1, 2, 3]"],
    "wrong shape": [header(MsgType.REGISTER_SHUFFLE), json.dumps({"app_id": 5, "num_mappers": "x"}).encode()],
    "missing fields": [header(MsgType.MAPPER_END), b"{}"],
    "path in id": [
        header(MsgType.REGISTER_APP),
        json.dumps({"name": "x", "app_id": "../../etc/passwd"}).encode(),
    ],
    "huge numbers": [
        header(MsgType.REGISTER_SHUFFLE),
        json.dumps({"app_id": "a", "num_mappers": 10**30, "num_partitions": 1}).encode(),
    ],
    "deep json": [header(), b"[" * 100_000 + b"]" * 100_000],
}


UNSIGNED = {"wrong shape", "missing fields", "huge numbers"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_garbage_gets_bad_request_and_the_master_keeps_serving(
    master: Proc, dealer: zmq.Socket[bytes], case: str
) -> None:
    dealer.send_multipart(CASES[case])
    head, body = reply_status(dealer)
    if case in UNSIGNED:
        # an app's or a member's message without a signature is refused before its body is read
        assert head.status == Unauthorized.status and body["code"] == "UNAUTHORIZED"
    else:
        assert head.status == BadRequest.status
        assert body["code"] == "BAD_REQUEST" and body["message"]
    still_serving(master)


def test_a_100_mib_frame_is_refused_and_the_master_keeps_serving(
    master: Proc, dealer: zmq.Socket[bytes]
) -> None:
    dealer.send_multipart([header(), b"{}", b"\0" * (100 * 1024 * 1024)])
    try:
        head, _ = reply_status(dealer)
        assert head.status == BadRequest.status
    except zmq.Again:
        pass  # libzmq dropped the connection (MAXMSGSIZE): an accepted answer
    still_serving(master)


def test_raw_tcp_garbage_is_dropped_and_the_master_keeps_serving(master: Proc) -> None:
    host, port = master.url.removeprefix("tcp://").rsplit(":", 1)
    for payload in (os.urandom(1000), b"GET / HTTP/1.1\r\n\r\n", b"\xff" * 64, b""):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(payload)
    still_serving(master)


def test_the_master_counted_and_logged_bad_requests(master: Proc, dealer: zmq.Socket[bytes]) -> None:
    dealer.send_multipart([header()[: HEADER_SIZE - 1], b"{}"])
    reply_status(dealer)
    still_serving(master)
    assert "BAD_REQUEST" in master.log() or "bad request" in master.log().lower()
