"""The ids on JSON log lines where requests are handled: the RPC server, the master actor,
and the worker's actors (``--log-format json``)."""

from __future__ import annotations

import json
import logging
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import zmq

from croupier.actors import master_actor
from croupier.actors.master_front import MasterFront
from croupier.core import commands as c
from croupier.core.commands import encode_command
from croupier.core.config import MasterConfig
from croupier.core.errors import InternalError
from croupier.core.wire import MsgType
from croupier.ha.eventlog import MemoryEventLog
from croupier.ops.logs import JsonFormatter
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer
from tests.actors.test_partition_actor import Parts, append, batches, commit, parts  # noqa: F401 (the fixture)
from tests.storage.helpers import key


class Lines(logging.Handler):
    """Keeps each record as its JSON line, formatted on the logging thread."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter({"worker_id": "worker-1"}))
        self.lines: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.put(json.loads(self.format(record)))

    def next(self, msg_part: str) -> dict[str, Any]:
        while True:
            line = self.lines.get(timeout=10)
            if msg_part in line["msg"]:
                return line


@contextmanager
def json_lines(name: str) -> Iterator[Lines]:
    logger = logging.getLogger(name)
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def logs_the_body(request: Request, responder: Responder) -> None:
    logging.getLogger("croupier.test.handler").warning("handled %s", request.request_id)
    responder.ok({})


@pytest.fixture
def client() -> Iterator[RpcClient]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    server = RpcServer("tcp://127.0.0.1:0", logs_the_body, context=ctx)
    server.start()
    try:
        with RpcClient(server.url, context=ctx, timeout=10.0, retries=0) as rpc:
            yield rpc
    finally:
        server.stop()
        ctx.term()


def test_a_request_s_ids_are_on_the_lines_its_handler_logs(client: RpcClient) -> None:
    with json_lines("croupier.test.handler") as handler:
        client.call(MsgType.PING, {"app_id": "app-1", "shuffle_id": 2})
        line = handler.next("handled")
        assert (line["app_id"], line["shuffle_id"], line["worker_id"]) == ("app-1", 2, "worker-1")
        client.call(MsgType.PING, {"other": 1})  # the next request's lines do not keep them
        line = handler.next("handled")
        assert "app_id" not in line and "shuffle_id" not in line


def test_a_hostile_body_puts_no_object_and_no_huge_string_on_the_line(client: RpcClient) -> None:
    with json_lines("croupier.test.handler") as handler:
        client.call(MsgType.PING, {"app_id": {"nested": ["x"] * 100}, "shuffle_id": [1, 2]})
        line = handler.next("handled")
        assert "app_id" not in line and "shuffle_id" not in line
        client.call(MsgType.PING, {"app_id": "y" * 1_000_000, "shuffle_id": True})
        line = handler.next("handled")
        assert line["app_id"] == "y" * 128 + "..." and "shuffle_id" not in line


def test_a_late_push_dropped_by_a_partition_actor_carries_its_ids(parts: Parts) -> None:  # noqa: F811
    actor, _, limiter = parts
    k = key(app="app-7", shuffle=5, partition=2)
    bs, n, _ = batches(1, [100])
    append(actor, limiter, [(k, bs, n)])
    commit(actor, [k])
    with json_lines("croupier.actors.partition_actor") as handler:
        late, n2, _ = batches(2, [100])
        append(actor, limiter, [(k, late, n2)])
        commit(actor, [k])  # after the late push on the actor's thread
        line = handler.next("is committed or failed; dropping")
    assert (line["app_id"], line["shuffle_id"], line["level"]) == ("app-7", 5, "INFO")


def test_a_line_the_master_actor_logs_for_a_command_carries_its_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("decide is broken")

    monkeypatch.setattr(master_actor, "decide", broken)
    front = MasterFront("tcp://127.0.0.1:0", config=MasterConfig(sweep_interval=0, takeover_grace=0)).start()
    try:
        front.serve(MemoryEventLog())
        with json_lines("croupier.actors.master_actor") as handler, RpcClient(front.url, timeout=10.0) as rpc:
            with pytest.raises(InternalError):
                rpc.call(*encode_command(c.UnregisterShuffle("app-3", 4)))
            line = handler.next("decide failed on")
    finally:
        front.stop()
    assert (line["app_id"], line["shuffle_id"], line["level"]) == ("app-3", 4, "ERROR")
    # decided on the RPC server's thread while the actor is idle (issue 27's BurstGate), else on the actor's
    assert line["thread"].startswith(("croupier-master", "MasterActor"))
    assert "RuntimeError: decide is broken" in line["exc"]
