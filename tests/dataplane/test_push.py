"""``PushHandler`` behind real push and replicate servers: admission against the memory
limiter, what a PUSH answers when its replica refuses the REPLICATE, and the requests
refused whole (nothing stored, nothing forwarded): a location not reserved here, a
replica that is not the placed peer, a batch whose digest does not match (on a worker with
a cluster secret: not keyed by the app's key, PROTOCOL §5.1), a location split hard; and
the soft split named in the OK reply of a PUSH that was stored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from croupier.actors.flusher import FlusherActor
from croupier.actors.partition_actor import Failures, PartitionActor
from croupier.core.batch import BatchHeader
from croupier.core.codec import to_json
from croupier.core.dataplane import Push, ReplicaTarget, Replicate, Reserve
from croupier.core.errors import BadRequest, Congested, CroupierError, HardSplit, StaleLocation, Unavailable
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.push import PushHandler
from croupier.dataplane.reservations import Reservations
from croupier.dataplane.split import SplitPolicy
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import MemoryPartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.digest import batch_digest
from croupier.transports.rpc import Request, Responder, RpcClient, RpcServer
from croupier.transports.secret import ClusterSecret
from tests.storage.helpers import batch, key

ME = Identity("worker-1", "inc-1")
SECRET = ClusterSecret(bytes(range(32)))


@dataclass
class Parts:
    limiter: MemoryLimiter
    locations: Locations
    client: RpcClient
    replicate_client: RpcClient  # to this worker's own replicate server
    reservations: Reservations
    replica_url: str
    replica_error: list[CroupierError]  # what the replica raises (nothing: OK)
    replicated: list[tuple[dict[str, object], list[bytes]]]  # the REPLICATEs it got: body, frames
    split: SplitPolicy  # threshold 1 GB: no soft split unless a test lowers it
    replies: list[dict[str, object]]  # the OK reply bodies of ``push``
    failures: Failures  # the locations whose disk failed here


@pytest.fixture
def parts(request: pytest.FixtureRequest) -> Iterator[Parts]:
    """The handler behind its servers; ``indirect`` parametrization passes a cluster secret."""
    secret: ClusterSecret | None = getattr(request, "param", None)
    store = MemoryPartitionStore()
    # the data watermarks (1000 bytes); the state of locations fits. The secret's test stores two
    # locations, which an empty worker's one-message allowance does not cover: a larger cap
    limiter = MemoryLimiter(1000 if secret is None else 1_000_000, held_share=100)
    flusher = FlusherActor.start(0, limiter)
    locations = Locations(limiter)
    locations.open(1, lambda: PartitionActor.start(store, [flusher], limiter))
    replicator = AsyncRpcClient(timeout=10)
    replicator.start()
    reservations = Reservations(ME)
    # shuffle 0 unreplicated, shuffle 1 replicated to worker-2; shuffle 2 holds worker-1 as replica
    reservations.reserve(Reserve("app-1", 0, ME.incarnation, 4, False, pairs=(("worker-1", None),)))
    reservations.reserve(Reserve("app-1", 1, ME.incarnation, 4, True, pairs=(("worker-1", "worker-2"),)))
    reservations.reserve(Reserve("app-1", 2, ME.incarnation, 4, True, pairs=(("worker-2", "worker-1"),)))
    split = SplitPolicy(10**9)
    failures = Failures()
    handler = PushHandler(
        ME, locations, reservations, limiter, replicator, secret=secret, split=split, failures=failures
    )
    server = RpcServer("tcp://127.0.0.1:0", handler.on_push, allowed_types=[int(MsgType.PUSH)])
    server.start()
    own_replica = RpcServer("tcp://127.0.0.1:0", handler.on_replicate, allowed_types=[int(MsgType.REPLICATE)])
    own_replica.start()
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
    replicate_client = RpcClient(own_replica.url, timeout=10, retries=0)
    try:
        yield Parts(
            limiter,
            locations,
            client,
            replicate_client,
            reservations,
            replica_server.url,
            replica_error,
            replicated,
            split,
            [],
            failures,
        )
    finally:
        client.close()
        replicate_client.close()
        server.stop()
        own_replica.stop()
        replica_server.stop()
        replicator.stop()
        for ref in locations.all():
            ref.stop()
        flusher.stop()
        store.close()


def push(
    parts: Parts,
    size: int,
    *,
    replicated: bool,
    shuffle: int | None = None,
    where: tuple[tuple[int, int], ...] = ((0, 0),),
    bad: int | None = None,
) -> bytes:
    """PUSH one batch of ``size`` bytes to each of ``where``; batch ``bad`` gets a wrong digest."""
    raws = []
    for i in range(len(where)):
        header, raw = batch(1, 0, i, b"x" * size)
        if i == bad:
            header = BatchHeader(1, 0, i, size, 0, bytes(16))
            raw = header.encode() + raw[36:]
        raws.append(raw)
    target = ReplicaTarget("worker-2", parts.replica_url, "inc-2") if replicated else None
    sid = (1 if replicated else 0) if shuffle is None else shuffle
    body = Push("app-1", sid, ME.incarnation, where, target)
    frames = [b"".join(r[:36] for r in raws), *(r[36:] for r in raws)]
    parts.replies.append(parts.client.call(int(MsgType.PUSH), to_json(body), frames).body)
    return b"".join(raws)


def buffered(parts: Parts) -> int:
    """The limiter's bytes of buffered data (its count less the state its locations hold)."""
    return parts.limiter.used - parts.limiter.held


def test_a_push_past_the_pause_watermark_is_congested_and_takes_no_memory(parts: Parts) -> None:
    push(parts, 500, replicated=False)  # held unflushed (below the flush threshold)
    assert buffered(parts) == 536
    assert parts.locations.get(key(app="app-1")) is not None
    with pytest.raises(Congested):
        push(parts, 500, replicated=False)  # 1072 of 1000 bytes: past the 0.85 watermark
    assert buffered(parts) == 536 and parts.limiter.congested == 1


def test_a_push_is_acked_after_its_frames_went_unchanged_to_the_replica(parts: Parts) -> None:
    raw = push(parts, 100, replicated=True)
    assert buffered(parts) == 136
    assert parts.replicated == [
        (to_json(Replicate("app-1", 1, "inc-2", ((0, 0),))), [raw[:36], raw[36:]]),
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


@pytest.mark.parametrize(
    ("shuffle", "where", "replicated", "refusal"),
    [
        (7, ((0, 0),), False, StaleLocation),  # a shuffle never reserved here
        (0, ((0, 1),), False, StaleLocation),  # an epoch not placed here
        (2, ((0, 0),), True, StaleLocation),  # held here as replica, pushed to as primary
        (1, ((0, 0),), False, BadRequest),  # a replicated location pushed without its replica
        (0, ((0, 0),), True, BadRequest),  # an unreplicated location pushed with a replica
        (0, ((9, 0),), False, BadRequest),  # a partition the shuffle does not have
        (0, ((0, 0), (1, 1)), False, StaleLocation),  # one good batch does not save the push
    ],
)
def test_a_push_for_a_location_not_placed_so_is_refused_whole(
    parts: Parts,
    shuffle: int,
    where: tuple[tuple[int, int], ...],
    replicated: bool,
    refusal: type[CroupierError],
) -> None:
    with pytest.raises(refusal):
        push(parts, 100, replicated=replicated, shuffle=shuffle, where=where)
    assert parts.limiter.used == 0 and len(parts.locations) == 0 and parts.replicated == []


def test_a_push_with_a_bad_digest_is_a_bad_request_and_nothing_is_stored_or_forwarded(parts: Parts) -> None:
    with pytest.raises(BadRequest, match="digest"):
        push(parts, 100, replicated=True, where=((0, 0), (1, 0)), bad=1)
    assert parts.limiter.used == 0 and len(parts.locations) == 0 and parts.replicated == []
    push(parts, 100, replicated=True, where=((0, 0), (1, 0)))
    assert buffered(parts) == 2 * 136


def replicate(parts: Parts, shuffle: int, where: tuple[int, int], *, bad: bool = False) -> None:
    _, raw = batch(1, 0, 0, b"r" * 50)
    if bad:
        raw = BatchHeader(1, 0, 0, 50, 0, bytes(16)).encode() + raw[36:]
    body = Replicate("app-1", shuffle, ME.incarnation, (where,))
    parts.replicate_client.call(int(MsgType.REPLICATE), to_json(body), [raw[:36], raw[36:]])


def test_a_replicate_is_taken_only_for_a_location_held_here_as_replica(parts: Parts) -> None:
    for shuffle, where in ((1, (0, 0)), (2, (0, 1)), (5, (0, 0))):  # held as primary, wrong epoch, unknown
        with pytest.raises(StaleLocation):
            replicate(parts, shuffle, where)
    assert parts.limiter.used == 0 and len(parts.locations) == 0
    replicate(parts, 2, (0, 0))
    assert parts.locations.get(key(app="app-1", shuffle=2, role="replica")) is not None


def test_a_replicate_is_not_hashed_again(parts: Parts, monkeypatch: pytest.MonkeyPatch) -> None:
    """The primary checked the digests it forwards, and only a member sends a REPLICATE: the
    replica stores the frames without hashing them (PROTOCOL §5.2). A frame damaged on the way
    is stored as it came; the reader finds it by its digest
    (``integration/test_data_plane.py::test_a_replicate_damaged_on_the_way_...``)."""
    from croupier.transports import digest

    hashed: list[int] = []
    real = digest.batch_digest

    def counted(*args: Any, **kwargs: Any) -> bytes:
        hashed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(digest, "batch_digest", counted)
    replicate(parts, 2, (0, 0), bad=True)
    assert hashed == []
    assert parts.locations.get(key(app="app-1", shuffle=2, role="replica")) is not None
    assert buffered(parts) == 36 + 50


def _forged(data: bytes, key: bytes | None) -> bytes:
    """Batch (map 1, attempt 0, batch 0) of ``data`` with a right layout, its digest made with ``key``."""
    return BatchHeader(1, 0, 0, len(data), 0, batch_digest(1, 0, 0, 0, data, key)).encode() + data


@pytest.mark.parametrize("parts", [SECRET], indirect=True)
@pytest.mark.parametrize(
    "made_with", [None, bytes(32), SECRET.app_key("app-2")], ids=["unkeyed", "zeros", "other-app"]
)
def test_a_forged_batch_is_refused_by_a_worker_with_a_secret(parts: Parts, made_with: bytes | None) -> None:
    """An attacker without the app key pushes a batch with the right layout and a digest of its
    own: BAD_REQUEST naming the batch, nothing stored or forwarded. (A REPLICATE needs the
    member key: ``integration/test_security.py`` sends one without it and gets UNAUTHORIZED.)"""
    forged = _forged(b"injected", made_with)
    body = Push("app-1", 1, ME.incarnation, ((0, 0),), ReplicaTarget("worker-2", parts.replica_url, "inc-2"))
    with pytest.raises(BadRequest, match=r"batch 0 \(map 1 attempt 0 batch 0\) does not match its digest"):
        parts.client.call(int(MsgType.PUSH), to_json(body), [forged[:36], forged[36:]])
    assert parts.limiter.used == 0 and len(parts.locations) == 0 and parts.replicated == []
    # the app's own writer, keyed by its app key, gets in
    real = _forged(b"real", SECRET.app_key("app-1"))
    parts.client.call(int(MsgType.PUSH), to_json(body), [real[:36], real[36:]])
    rep = Replicate("app-1", 2, ME.incarnation, ((0, 0),))
    parts.replicate_client.call(int(MsgType.REPLICATE), to_json(rep), [real[:36], real[36:]])
    assert buffered(parts) == 2 * len(real) and len(parts.replicated) == 1


@pytest.mark.parametrize("replicated", [False, True])
def test_a_push_crossing_the_split_threshold_is_stored_and_its_ok_reply_names_the_location(
    parts: Parts, replicated: bool
) -> None:
    parts.split.threshold = 150  # 76 bytes per batch (header included): two cross it
    parts.split.taken("app-1", 1 if replicated else 0, {(2, 0): 149})  # as if pushed before
    push(parts, 40, replicated=replicated, where=((0, 0), (1, 0), (0, 0), (2, 0)))
    assert parts.replies == [{"soft_split": [[0, 0], [2, 0]]}]
    assert buffered(parts) == 4 * 76  # every batch stored
    assert parts.split.size("app-1", 1 if replicated else 0, 0, 0) == 2 * 76


@pytest.mark.parametrize("replicated", [False, True])
def test_a_decommissioning_worker_refuses_every_push_hard_and_stores_nothing(
    parts: Parts, replicated: bool
) -> None:
    parts.split.decommission()
    with pytest.raises(HardSplit) as caught:
        push(parts, 100, replicated=replicated, where=((1, 0), (0, 0)))
    assert caught.value.details == {"partitions": [[0, 0], [1, 0]], "reason": "the worker is decommissioning"}
    assert parts.limiter.used == 0 and len(parts.locations) == 0 and parts.replicated == []


def test_a_hard_split_hook_refuses_the_push_naming_only_its_locations(parts: Parts) -> None:
    parts.split.add_hard(lambda app, shuffle, partition, epoch: partition == 1)
    push(parts, 100, replicated=False, where=((0, 0),))
    with pytest.raises(HardSplit) as caught:
        push(parts, 100, replicated=False, where=((0, 0), (1, 0)))
    assert caught.value.details["partitions"] == [[1, 0]]
    assert buffered(parts) == 136  # the first push only


def test_a_location_whose_disk_failed_names_its_partition_and_epoch_like_a_split(parts: Parts) -> None:
    # issue 22 §3.8: one HARD_SPLIT form, [[partition, epoch]], which REVIVE_PARTITION needs
    parts.failures.mark(key(app="app-1", shuffle=0, partition=1, epoch=0), [(7, 0)])  # map 7 lost
    with pytest.raises(HardSplit) as caught:
        push(parts, 100, replicated=False, shuffle=0, where=((0, 0), (1, 0)))
    assert caught.value.details["partitions"] == [[1, 0]]
    assert caught.value.details["failed_worker"] == "worker-1"
    assert isinstance(caught.value.details["reason"], str)
    assert parts.limiter.used == 0 and len(parts.locations) == 0
