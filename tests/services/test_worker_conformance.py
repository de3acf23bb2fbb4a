"""The worker data-plane port: one conformance suite for the real ``WorkerService`` and the
in-memory ``FakeWorker`` the SDK tests use (PROTOCOL.md §5).

Each case talks the wire protocol to a primary and its replica: reserve, push (with
write-ahead replication), commit, open, fetch, destroy, and the errors a client must be
able to rely on. The fixture reserves shuffles 1..8 (partitions 0..7 at epoch 0 on the
pair) as the master would; a push for anything else is refused and stores nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from croupier.core.batch import BATCH_HEADER, FLAG_SEAL, BatchHeader, iter_batches
from croupier.core.codec import from_json, to_json
from croupier.core.config import WorkerConfig
from croupier.core.dataplane import (
    CommitFiles,
    CommitFilesReply,
    Destroy,
    DestroyReply,
    FetchChunk,
    FetchChunkReply,
    LocationReport,
    OpenStream,
    OpenStreamReply,
    Push,
    ReplicaTarget,
    Reserve,
    ReserveReply,
)
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, NotCommitted, StaleLocation, UnknownShuffle
from croupier.core.wire import MsgType
from croupier.services.worker import WorkerService
from croupier.transports.digest import batch_digest
from croupier.transports.rpc import RpcClient
from tests.sdk.fakes import FakeWorker, start_master

APP = "conf-app"


@dataclass
class Node:
    """One worker as a client sees it."""

    worker_id: str
    incarnation: str
    push: RpcClient
    fetch: RpcClient
    control: RpcClient
    replicate_url: str


@dataclass
class Pair:
    primary: Node
    replica: Node

    def target(self) -> ReplicaTarget:
        return ReplicaTarget(self.replica.worker_id, self.replica.replicate_url, self.replica.incarnation)

    def reserve(self, shuffle: int, **placement: object) -> None:
        """Reserve ``shuffle`` on both workers as the master does: 8 partitions on this pair at epoch 0."""
        fields: dict[str, object] = {
            "num_partitions": 8,
            "replicate": True,
            "pairs": ((self.primary.worker_id, self.replica.worker_id),),
        }
        fields.update(placement)
        for node in (self.primary, self.replica):
            body = to_json(Reserve(APP, shuffle, node.incarnation, **fields))  # type: ignore[arg-type]
            reply = from_json(ReserveReply, node.control.call(int(MsgType.RESERVE), body).body)
            assert reply.shuffles >= 1


def _node(worker_id: str, incarnation: str, push: str, fetch: str, control: str, replicate: str) -> Node:
    return Node(
        worker_id,
        incarnation,
        RpcClient(push, timeout=10, retries=0),
        RpcClient(fetch, timeout=10, retries=0),
        RpcClient(control, timeout=10, retries=0),
        replicate,
    )


@pytest.fixture(params=["real", "fake"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    nodes: list[Node] = []
    if request.param == "real":
        master = start_master()
        # the reservations below are made by hand, not by this master, whose orphan sweep would
        # delete them at the next heartbeat: the fixture waits out each worker's first (empty) one
        config = WorkerConfig(heartbeat_interval=3600, chunk_size=4096, flush_threshold=1024)
        workers = [WorkerService(master.url, [tmp_path / f"w{i}"], config=config) for i in range(2)]
        try:
            for w in workers:
                w.start()
                u = w.urls
                nodes.append(
                    _node(w.worker_id, w.incarnation, u["push"], u["fetch"], u["control"], u["replicate"])
                )
            deadline = time.monotonic() + 10
            while (master.describe().commands or 0) < 2 * len(workers) and time.monotonic() < deadline:
                time.sleep(0.01)  # a registration and a heartbeat each
            yield _reserved(Pair(*nodes))
        finally:
            for n in nodes:
                for c in (n.push, n.fetch, n.control):
                    c.close()
            for w in workers:
                w.stop()
            master.stop()
        return
    peers: dict[str, FakeWorker] = {}
    fakes = [FakeWorker(f"fake{i}", peers, chunk_size=4096) for i in range(2)]
    for f in fakes:
        peers[f.worker_id] = f
        url = f.server.url
        nodes.append(_node(f.worker_id, f.incarnation, url, url, url, url))
    try:
        yield _reserved(Pair(*nodes))
    finally:
        for n in nodes:
            for c in (n.push, n.fetch, n.control):
                c.close()
        for f in fakes:
            f.stop()


def _reserved(pair: Pair) -> Pair:
    for shuffle in range(1, 9):
        pair.reserve(shuffle)
    return pair


def data_batch(map_id: int, batch_id: int, data: bytes) -> tuple[bytes, bytes]:
    header = BatchHeader(map_id, 0, batch_id, len(data), 0, batch_digest(map_id, 0, batch_id, 0, data))
    return header.encode(), data


def seal_batch(map_id: int, count: int) -> tuple[bytes, bytes]:
    header = BatchHeader(map_id, 0, count, 0, FLAG_SEAL, batch_digest(map_id, 0, count, FLAG_SEAL, b""))
    return header.encode(), b""


def push(
    pair: Pair,
    shuffle: int,
    batches: list[tuple[int, tuple[bytes, bytes]]],
    *,
    incarnation: str | None = None,
    epoch: int = 0,
    replicated: bool = True,
) -> None:
    """PUSH ``batches`` (partition, (header, data)) at ``epoch`` to the primary, replicated."""
    body = Push(
        APP,
        shuffle,
        incarnation or pair.primary.incarnation,
        tuple((p, epoch) for p, _ in batches),
        pair.target() if replicated else None,
    )
    frames = [b"".join(h for _, (h, _) in batches), *(d for _, (_, d) in batches)]
    pair.primary.push.call(int(MsgType.PUSH), to_json(body), frames)


# the reply bodies' keys, in order, as PROTOCOL.md §5.2 shows them
COMMITTED_KEYS = ["partition", "epoch", "role", "ok", "bytes", "batches", "chunks", "seals"]


def commit(node: Node, shuffle: int) -> dict[int, LocationReport]:
    body = node.control.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles(APP, shuffle))).body
    assert list(body) == ["incarnation", "locations"]
    assert all(list(loc) == COMMITTED_KEYS for loc in body["locations"])
    reply = from_json(CommitFilesReply, body)
    assert reply.incarnation == node.incarnation
    return {loc.partition: loc for loc in reply.locations}


def read(node: Node, shuffle: int, partition: int, role: str) -> bytes:
    base = (APP, shuffle, partition, 0, role, node.incarnation)
    body = node.fetch.call(int(MsgType.OPEN_STREAM), to_json(OpenStream(*base))).body
    assert list(body) == ["chunks", "bytes", "batches"]
    opened = from_json(OpenStreamReply, body)
    out = b""
    for i, (offset, length) in enumerate(opened.chunks):
        reply = node.fetch.call(int(MsgType.FETCH_CHUNK), to_json(FetchChunk(*base, chunk=i)))
        assert from_json(FetchChunkReply, reply.body) == FetchChunkReply(offset, length)
        assert len(reply.payloads) == 1 and len(reply.payloads[0]) == length
        assert offset == len(out)
        out += bytes(reply.payloads[0])
    assert opened.bytes == len(out)
    return out


def test_pushed_batches_are_committed_and_read_back_from_both_copies(pair: Pair) -> None:
    batches = []
    expected: dict[int, bytes] = {0: b"", 1: b""}
    for i in range(40):
        p = i % 2
        hb = data_batch(7, i // 2, bytes([i]) * (100 + 37 * i))
        batches.append((p, hb))
        expected[p] += hb[0] + hb[1]
    for p in (0, 1):
        sb = seal_batch(7, 20)
        batches.append((p, sb))
        expected[p] += sb[0]
    for start in range(0, len(batches), 8):  # several pushes
        push(pair, 1, batches[start : start + 8])
    for node, role in ((pair.primary, CopyRole.PRIMARY), (pair.replica, CopyRole.REPLICA)):
        reports = commit(node, 1)
        assert set(reports) == {0, 1}
        for p in (0, 1):
            report = reports[p]
            assert report.ok is True and report.role == role and report.epoch == 0
            assert report.bytes == len(expected[p])
            assert report.batches == 20  # data batches; the seal is in "seals"
            assert report.seals == ((7, 0, 20),)
            data = read(node, 1, p, role)
            assert data == expected[p]
            assert [h.batch_id for _, h, _ in iter_batches(data)] == [*range(20), 20]
        opened = node.fetch.call(
            int(MsgType.OPEN_STREAM), to_json(OpenStream(APP, 1, 0, 0, role, node.incarnation))
        )
        stream = from_json(OpenStreamReply, opened.body)
        assert stream.batches == 20
        assert len(stream.chunks) > 1  # cut at about chunk_size, at batch boundaries


def test_a_location_is_not_readable_before_its_commit(pair: Pair) -> None:
    push(pair, 2, [(3, data_batch(1, 0, b"x" * 50))])
    with pytest.raises(NotCommitted):
        pair.primary.fetch.call(
            int(MsgType.OPEN_STREAM),
            to_json(OpenStream(APP, 2, 3, 0, CopyRole.PRIMARY, pair.primary.incarnation)),
        )


def test_a_location_never_pushed_to_is_unknown(pair: Pair) -> None:
    push(pair, 3, [(0, data_batch(1, 0, b"y"))])
    commit(pair.primary, 3)
    for partition, shuffle in ((5, 3), (0, 99)):
        with pytest.raises(UnknownShuffle):
            pair.primary.fetch.call(
                int(MsgType.OPEN_STREAM),
                to_json(OpenStream(APP, shuffle, partition, 0, CopyRole.PRIMARY, pair.primary.incarnation)),
            )


def test_another_incarnation_is_a_stale_location(pair: Pair) -> None:
    with pytest.raises(StaleLocation):
        push(pair, 4, [(0, data_batch(1, 0, b"z"))], incarnation="someone-else")
    push(pair, 4, [(0, data_batch(1, 0, b"z"))])
    commit(pair.primary, 4)
    with pytest.raises(StaleLocation):
        pair.primary.fetch.call(
            int(MsgType.OPEN_STREAM), to_json(OpenStream(APP, 4, 0, 0, CopyRole.PRIMARY, "someone-else"))
        )


def test_a_push_after_the_commit_is_refused(pair: Pair) -> None:
    push(pair, 5, [(0, data_batch(1, 0, b"before"))])
    commit(pair.primary, 5)
    with pytest.raises(StaleLocation):
        push(pair, 5, [(0, data_batch(1, 1, b"after"))])
    assert read(pair.primary, 5, 0, CopyRole.PRIMARY) == b"".join(data_batch(1, 0, b"before"))


def test_malformed_requests_are_bad_requests_and_the_worker_keeps_serving(pair: Pair) -> None:
    header, data = data_batch(1, 0, b"abc")
    body = to_json(Push(APP, 6, pair.primary.incarnation, ((0, 0),), pair.target()))
    for frames in ([header], [header[:-1], data], [header + header, data], [header, data + b"!"]):
        with pytest.raises(BadRequest):
            pair.primary.push.call(int(MsgType.PUSH), body, frames)
    push(pair, 6, [(0, (header, data))])
    commit(pair.primary, 6)
    with pytest.raises(BadRequest):
        pair.primary.fetch.call(
            int(MsgType.FETCH_CHUNK),
            to_json(FetchChunk(APP, 6, 0, 0, CopyRole.PRIMARY, pair.primary.incarnation, chunk=9)),
        )
    assert read(pair.primary, 6, 0, CopyRole.PRIMARY) == header + data


def test_destroy_removes_a_shuffle_and_only_it(pair: Pair) -> None:
    for shuffle in (7, 8):
        push(pair, shuffle, [(0, data_batch(1, 0, b"d" * 10)), (1, data_batch(1, 0, b"e" * 10))])
        commit(pair.primary, shuffle)
    reply = pair.primary.control.call(int(MsgType.DESTROY), to_json(Destroy(APP, 7)))
    assert from_json(DestroyReply, reply.body) == DestroyReply(removed=2)
    with pytest.raises(UnknownShuffle):
        read(pair.primary, 7, 0, CopyRole.PRIMARY)
    assert read(pair.primary, 8, 1, CopyRole.PRIMARY) == b"".join(data_batch(1, 0, b"e" * 10))
    assert BATCH_HEADER.size == 36


def test_a_push_for_a_location_not_reserved_there_is_refused_and_stores_nothing(pair: Pair) -> None:
    good = (0, data_batch(1, 0, b"kept"))
    with pytest.raises(StaleLocation):
        push(pair, 20, [good])  # shuffle 20 was never reserved
    with pytest.raises(StaleLocation):
        push(pair, 1, [good, (1, data_batch(1, 0, b"no"))], epoch=1)  # epoch 1 was not placed here
    pair.reserve(20, pairs=((pair.replica.worker_id, pair.primary.worker_id),))  # the roles swapped
    with pytest.raises(StaleLocation):
        push(pair, 20, [good])
    with pytest.raises(BadRequest):
        push(pair, 1, [good], replicated=False)  # the placed replica left out
    with pytest.raises(BadRequest):
        push(pair, 1, [(8, data_batch(1, 0, b"no"))])  # a partition the shuffle does not have
    for node in (pair.primary, pair.replica):
        assert commit(node, 20) == {}
    push(pair, 1, [good])
    for node, role in ((pair.primary, CopyRole.PRIMARY), (pair.replica, CopyRole.REPLICA)):
        assert set(commit(node, 1)) == {0}
        assert read(node, 1, 0, role) == b"".join(good[1])


def test_a_batch_with_a_bad_digest_is_a_bad_request_and_nothing_of_its_push_is_stored(pair: Pair) -> None:
    good = (0, data_batch(1, 0, b"fine"))
    header, data = data_batch(1, 1, b"flipped")
    bad = (1, (header, data[:-1] + b"?"))
    with pytest.raises(BadRequest):
        push(pair, 2, [good, bad])
    for node in (pair.primary, pair.replica):
        assert commit(node, 2) == {}
    push(pair, 3, [good, (1, (header, data))])
    assert set(commit(pair.primary, 3)) == {0, 1}
