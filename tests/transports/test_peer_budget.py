"""Replies are bounded in bytes per peer (issue 13): a client that stops reading stalls only itself.

100 requests for 8 MiB replies (the size of a fetch chunk) from a client that reads
nothing: before, the server queued all of them (800 MiB); now it holds about the
per-peer cap (64 MiB) and parks the rest, serves other clients meanwhile, and answers
every request once the client reads again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import zmq

from croupier.core.wire import Header, Kind, MsgType
from croupier.transports._peer_budget import DEFAULT_PEER_REPLY_BYTES
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer

_Ctx = zmq.Context[zmq.Socket[bytes]]
MIB = 1024 * 1024
REPLY = 8 * MIB
REQUESTS = 100


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def big_reply(request: Request, responder: Responder) -> None:
    # a fresh buffer per reply, as a fetch reads each chunk from disk
    size = int(request.body.get("size", REPLY))
    if request.body.get("json"):
        responder.ok({"blob": "x" * size})
    else:
        responder.ok({}, [b"\x01" * size])


@pytest.fixture
def ctx() -> Iterator[_Ctx]:
    context: _Ctx = zmq.Context()
    yield context
    context.term()


def settle(server: RpcServer) -> None:
    """Wait until the server stops sending (its counters hold still for 0.5 s)."""
    last = None
    while (now := (server.stats.replies, server.stats.parked)) != last:
        last = now
        time.sleep(0.5)


@pytest.mark.parametrize("json_body", [False, True], ids=["fetch-chunks", "master-json"])
def test_unread_replies_are_bounded_per_peer(ctx: _Ctx, json_body: bool) -> None:
    with RpcServer("tcp://127.0.0.1:0", big_reply, context=ctx, name="budget") as server:
        lazy = ctx.socket(zmq.DEALER)
        lazy.setsockopt(zmq.LINGER, 0)
        lazy.setsockopt(zmq.RCVHWM, 1)  # the client reads nothing, and buffers little itself
        lazy.setsockopt(zmq.RCVBUF, 64 * 1024)
        lazy.connect(server.url)
        try:
            before = rss()
            body = b'{"json":true}' if json_body else b"{}"
            for rid in range(1, REQUESTS + 1):
                lazy.send_multipart([Header(Kind.REQUEST, MsgType.PING, rid).encode(), body])
            settle(server)
            grown = rss() - before
            print(f"RSS +{grown / MIB:.0f} MiB after {REQUESTS} unread {REPLY // MIB} MiB replies")
            # the cap, plus replies in the kernel and the client's own buffers, with margin
            assert grown < DEFAULT_PEER_REPLY_BYTES + 12 * REPLY, f"grew {grown / MIB:.0f} MiB"
            assert server.stats.parked > 0
            with RpcClient(server.url, context=ctx, timeout=5, retries=0) as other:
                assert other.call(MsgType.PING, {"size": 10}).body == {}
            got: set[int] = set()
            while len(got) < REQUESTS and lazy.poll(10_000):
                got.add(Header.decode(lazy.recv_multipart()[0]).request_id)
            assert got == set(range(1, REQUESTS + 1))
        finally:
            lazy.close(linger=0)


def test_parked_requests_reach_a_burst_handler(ctx: _Ctx) -> None:
    """A handler that answers once per burst (the master hands each burst to its actor at
    ``on_batch_end``) answers parked requests too, even when no later request comes.

    Before, requests resumed from the park went to the handler but the burst was never
    ended: the last ones of a pipelining client waited for a request that never came.
    """
    burst: list[Responder] = []

    def collect(_request: Request, responder: Responder) -> None:
        burst.append(responder)

    def answer_burst() -> None:
        for responder in burst:
            responder.ok({})
        burst.clear()

    # a small cap: a new peer's first replies are guessed at 1/16 of it, so 16 in flight park it
    with RpcServer(
        "tcp://127.0.0.1:0",
        collect,
        context=ctx,
        name="bursts",
        on_batch_end=answer_burst,
        max_peer_reply_bytes=64 * 1024,
    ) as server:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.url)
        try:
            for rid in range(1, 65):
                sock.send_multipart([Header(Kind.REQUEST, MsgType.PING, rid).encode(), b"{}"])
            got: set[int] = set()
            while len(got) < 64 and sock.poll(5_000):
                got.add(Header.decode(sock.recv_multipart()[0]).request_id)
            assert server.stats.parked > 0
            assert got == set(range(1, 65))
        finally:
            sock.close(linger=0)


def test_a_peer_that_disconnects_has_its_parked_requests_dropped_unhandled(ctx: _Ctx) -> None:
    """A client that sent many requests, read nothing and went away costs the server no more
    handling: once a reply finds the peer gone, its parked requests are dropped.

    Before, every parked request was handled once the gone peer's replies were dropped by
    libzmq, each reply computed for nobody (a master built 100 replies of 10,000 partitions
    for a closed socket, and its RPC thread did not stop within 10 s: tests/fuzz/test_live_unread).
    """
    handled = 0

    def counted(request: Request, responder: Responder) -> None:
        nonlocal handled
        handled += 1
        big_reply(request, responder)

    with RpcServer("tcp://127.0.0.1:0", counted, context=ctx, name="gone") as server:
        lazy = ctx.socket(zmq.DEALER)
        lazy.setsockopt(zmq.LINGER, 0)
        lazy.setsockopt(zmq.RCVHWM, 1)
        lazy.setsockopt(zmq.RCVBUF, 64 * 1024)
        lazy.connect(server.url)
        for rid in range(1, REQUESTS + 1):
            lazy.send_multipart([Header(Kind.REQUEST, MsgType.PING, rid).encode(), b"{}"])
        settle(server)
        before = handled
        assert server.stats.parked > 10
        lazy.close(linger=0)
        deadline = time.monotonic() + 10
        while server.stats.unroutable == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        settle(server)
        assert server.stats.unroutable > 0
        print(f"handled {before} before the peer went, {handled - before} after; shed {server.stats.shed}")
        assert handled - before <= 2, f"{handled - before} requests handled for a gone peer"
        assert server.stats.shed >= REQUESTS - handled
