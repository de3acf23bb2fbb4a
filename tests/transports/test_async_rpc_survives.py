"""The async RPC client thread survives any request it is handed (issue 13, "a lone surrogate").

A request whose URL or frames cannot be sent fails only its own callback; the thread
goes on serving every other request.
"""

from __future__ import annotations

import threading

import pytest
import zmq

from croupier.core.errors import BadRequest, CroupierError, InternalError
from croupier.core.wire import MsgType
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.rpc import Reply, Request, Responder, RpcClient, RpcServer

_Ctx = zmq.Context[zmq.Socket[bytes]]


def echo(request: Request, responder: Responder) -> None:
    responder.ok({"echo": request.body})


class Outcome:
    """One callback's result, waited for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: Reply | None = None
        self.error: CroupierError | None = None

    def __call__(self, reply: Reply | None, error: CroupierError | None) -> None:
        self.reply, self.error = reply, error
        self.done.set()

    def wait(self) -> Outcome:
        assert self.done.wait(10), "callback never ran"
        return self


@pytest.mark.parametrize(
    "url", ["tcp://\ud800:7001", "tcp://h\udcff.example:1", "tcp://[::1", "", "bogus://x"]
)
def test_unsendable_url_fails_only_its_request(ctx: _Ctx, url: str) -> None:
    client = AsyncRpcClient(context=ctx, timeout=5)
    client.start()
    try:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx) as server:
            bad = Outcome()
            client.send(url, MsgType.PING, {}, [], bad)
            assert bad.wait().error is not None
            good = Outcome()
            client.send(server.url, MsgType.PING, {"n": 1}, [], good)
            assert good.wait().error is None
            assert good.reply is not None and good.reply.body == {"echo": {"n": 1}}
    finally:
        client.stop()


def test_unsendable_frame_fails_only_its_request(ctx: _Ctx) -> None:
    client = AsyncRpcClient(context=ctx, timeout=5)
    client.start()
    try:
        with RpcServer("tcp://127.0.0.1:0", echo, context=ctx) as server:
            bad = Outcome()
            client.send(server.url, MsgType.PING, {}, [object()], bad)  # type: ignore[list-item]
            assert isinstance(bad.wait().error, BadRequest)
            good = Outcome()
            client.send(server.url, MsgType.PING, {}, [], good)
            assert good.wait().error is None
    finally:
        client.stop()


def test_server_answers_internal_when_a_reply_cannot_be_sent(ctx: _Ctx) -> None:
    def bad_payload(request: Request, responder: Responder) -> None:
        if request.body.get("bad"):
            responder.ok({}, [object()])  # type: ignore[list-item]
        else:
            responder.ok({"fine": True})

    with RpcServer("tcp://127.0.0.1:0", bad_payload, context=ctx) as server:
        with RpcClient(server.url, context=ctx, timeout=5, retries=0) as client:
            with pytest.raises(InternalError):
                client.call(MsgType.PING, {"bad": True})
            assert client.call(MsgType.PING, {}).body == {"fine": True}
        assert server.stats.internal_errors == 1
