"""``PushHandler`` behind a real push server: admission against the memory limiter, and
what a PUSH answers when its replica refuses the REPLICATE."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from croupier.actors.flusher import FlusherActor
from croupier.actors.partition_actor import PartitionActor
from croupier.core.codec import to_json
from croupier.core.dataplane import Push, ReplicaTarget, Replicate
from croupier.core.errors import Congested, CroupierError, StaleLocation, Unavailable
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.push import PushHandler
from croupier.storage.store import MemoryPartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.limiter import MemoryLimiter
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer
from tests.storage.helpers import batch, key

ME = Identity("worker-1", "inc-1")


@dataclass
class Parts:
    limiter: MemoryLimiter
    locations: Locations
    client: RpcClient
    replica_url: str
    replica_error: list[CroupierError]  # what the replica raises (nothing: OK)
    replicated: list[tuple[dict[str, object], list[bytes]]]  # the REPLICATEs it got: body, frames


@pytest.fixture
def parts() -> Iterator[Parts]:
    store = MemoryPartitionStore()
    limiter = MemoryLimiter(1000)
    flusher = FlusherActor.start(0, limiter)
    locations = Locations()
    locations.open(1, lambda: PartitionActor.start(store, [flusher], limiter))
    replicator = AsyncRpcClient(timeout=10)
    replicator.start()
    handler = PushHandler(ME, locations, limiter, replicator)
    server = RpcServer("tcp://127.0.0.1:0", handler.on_push, allowed_types=[int(MsgType.PUSH)])
    server.start()
    replica_error: list[CroupierError] = []
    replicated: list[tuple[dict[str, object], list[bytes]]] = []

    def replica(request: Request, responder: Responder) -> None:
        replicated.append((request.body, [bytes(p) for p in request.payloads]))
        if replica_error:
            raise replica_error[0]
        responder.ok({})

    replica_server = RpcServer("tcp://127.0.0.1:0", replica, allowed_types=[int(MsgType.REPLICATE)])
    replica_server.start()
    client = RpcClient(server.url, timeout=10, retries=0)
    try:
        yield Parts(limiter, locations, client, replica_server.url, replica_error, replicated)
    finally:
        client.close()
        server.stop()
        replica_server.stop()
        replicator.stop()
        for ref in locations.all():
            ref.stop()
        flusher.stop()
        store.close()


def push(parts: Parts, size: int, *, replicated: bool) -> bytes:
    _, raw = batch(1, 0, 0, b"x" * size)
    target = ReplicaTarget("worker-2", parts.replica_url, "inc-2") if replicated else None
    body = Push("app-1", 0, ME.incarnation, ((0, 0),), target)
    parts.client.call(int(MsgType.PUSH), to_json(body), [raw[:36], raw[36:]])
    return raw


def test_a_push_past_the_pause_watermark_is_congested_and_takes_no_memory(parts: Parts) -> None:
    push(parts, 500, replicated=False)  # held unflushed (below the flush threshold)
    assert parts.limiter.used == 536
    assert parts.locations.get(key(app="app-1")) is not None
    with pytest.raises(Congested):
        push(parts, 500, replicated=False)  # 1072 of 1000 bytes: past the 0.85 watermark
    assert parts.limiter.used == 536 and parts.limiter.congested == 1


def test_a_push_is_acked_after_its_frames_went_unchanged_to_the_replica(parts: Parts) -> None:
    raw = push(parts, 100, replicated=True)
    assert parts.limiter.used == 136
    assert parts.replicated == [
        (to_json(Replicate("app-1", 0, "inc-2", ((0, 0),))), [raw[:36], raw[36:]]),
    ]


@pytest.mark.parametrize(
    ("refusal", "answer"),
    [(Congested("replica full"), Congested), (StaleLocation("replica restarted"), Unavailable)],
)
def test_a_replica_refusal_is_congested_or_names_the_failed_worker(
    parts: Parts, refusal: CroupierError, answer: type[CroupierError]
) -> None:
    parts.replica_error.append(refusal)
    with pytest.raises(answer) as caught:
        push(parts, 100, replicated=True)
    if answer is Unavailable:
        assert caught.value.details == {"failed_worker": "worker-2"}
        assert "STALE_LOCATION" in caught.value.message
