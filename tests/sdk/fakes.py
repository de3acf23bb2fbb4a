"""An in-process cluster for SDK tests: the real master (``MasterService``) and
in-memory fake workers that speak the data-plane protocol, with fault injection.
``tests/services/test_worker_conformance.py`` holds them to the real worker's behaviour.

A fake worker serves push, replicate, fetch and control on one ROUTER socket. Replication
is an in-process call to the replica's fake. Like the real worker, a fake takes pushes only
for the locations the master reserved on it (``RESERVE``, kept in a real ``Reservations``)
and refuses a batch whose digest does not match, storing nothing of the push.

Faults: ``congest`` (answer CONGESTED to the next n pushes), ``refuse`` (answer this error
to every push), ``corrupt`` (flip a byte of every fetched chunk), ``crash()`` (stop
serving: requests time out).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from croupier.core.batch import BATCH_HEADER, BatchHeader, iter_batches
from croupier.core.codec import from_json
from croupier.core.commands import LoseWorker, RegisterWorker
from croupier.core.config import MasterConfig
from croupier.core.dataplane import (
    CommitFiles,
    CommitFilesReply,
    Destroy,
    DestroyReply,
    FetchChunk,
    FetchChunkReply,
    FetchSmall,
    FetchSmallReply,
    LocationReport,
    OpenStream,
    OpenStreamReply,
    Push,
    Reserve,
    ReserveReply,
    SmallLocation,
    encode_reply,
)
from croupier.core.errors import (
    BadRequest,
    Congested,
    CroupierError,
    NotCommitted,
    StaleLocation,
    Unavailable,
    UnknownShuffle,
)
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.reservations import Reservations
from croupier.services.master import MasterService
from croupier.transports.curve import CurveClient, CurveServer
from croupier.transports.digest import digest_ok
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import Request, Responder, RpcServer

Key = tuple[str, int, int, int, str]  # app, shuffle, partition, epoch, role


def start_master(curve: CurveServer | None = None) -> MasterService:
    """The real master, in memory, on a free port, without liveness sweeps."""
    config = MasterConfig(sweep_interval=0, takeover_grace=0)
    return MasterService("tcp://127.0.0.1:0", None, config=config, rng=random.Random(7), curve=curve).start()


class FakeWorker:
    """An in-memory worker. ``peers`` maps worker ids to fakes (for replication)."""

    def __init__(
        self,
        worker_id: str,
        peers: dict[str, FakeWorker],
        chunk_size: int = 2048,
        curve: CurveServer | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.incarnation = f"{worker_id}-1"
        self.reservations = Reservations(Identity(worker_id, self.incarnation))
        self.peers = peers
        self.chunk_size = chunk_size
        self.lock = threading.Lock()
        self.data: dict[Key, bytearray] = {}
        self.chunks: dict[Key, list[bytes]] = {}
        self.batch_counts: dict[Key, int] = {}
        self.committed: set[tuple[str, int]] = set()
        self.congest = 0
        self.refuse: CroupierError | None = None
        self.corrupt = False
        self.small = True  # answers FETCH_SMALL (False: as a worker from before it)
        self.small_requests = 0
        self.pushes = 0
        self.alive = True
        self.server = RpcServer(
            "tcp://127.0.0.1:0",
            self._handle,
            name=f"fake-{worker_id}",
            max_message_bytes=300 * 1024**2,
            curve=curve,
        )
        self.server.start()
        self.port = int(self.server.url.rsplit(":", 1)[1])

    def register(self, master: MasterClient) -> None:
        p = self.port
        master.call(RegisterWorker(self.worker_id, "127.0.0.1", p, p, p, p, 100_000, self.incarnation))

    def crash(self) -> None:
        """Stop answering; the memory is gone."""
        self.alive = False
        self.server.stop()

    def stop(self) -> None:
        if self.alive:
            self.alive = False
            self.server.stop()

    # -- handlers (server thread) ---------------------------------------------------------
    def _handle(self, request: Request, responder: Responder) -> None:
        t = request.msg_type
        if t == MsgType.PUSH:
            responder.ok(self._push(request))
        elif t == MsgType.RESERVE:
            reserve = from_json(Reserve, request.body)
            reserve.validate()
            responder.ok(encode_reply(ReserveReply(self.reservations.reserve(reserve))))
        elif t == MsgType.COMMIT_FILES:
            responder.ok(encode_reply(self._commit(from_json(CommitFiles, request.body))))
        elif t == MsgType.OPEN_STREAM:
            responder.ok(encode_reply(self._open(from_json(OpenStream, request.body))))
        elif t == MsgType.FETCH_CHUNK:
            reply, chunk = self._fetch(from_json(FetchChunk, request.body))
            responder.ok(encode_reply(reply), [chunk])
        elif t == MsgType.FETCH_SMALL and self.small:
            small, payloads = self._fetch_small(from_json(FetchSmall, request.body))
            responder.ok(encode_reply(small), payloads)
        elif t == MsgType.DESTROY:
            responder.ok(encode_reply(self._destroy(from_json(Destroy, request.body))))
        else:
            raise Unavailable(f"fake worker does not serve {t}")

    def _push(self, request: Request) -> dict[str, Any]:
        push = from_json(Push, request.body)
        if push.incarnation != self.incarnation:
            raise StaleLocation(f"{self.worker_id} is incarnation {self.incarnation}")
        if self.refuse is not None:
            raise self.refuse
        with self.lock:
            if self.congest:
                self.congest -= 1
                raise Congested(f"{self.worker_id} is congested")
            self.pushes += 1
        n = len(push.batches)
        if len(request.payloads) != n + 1:
            raise BadRequest(f"{n} batches need {n + 1} payload frames, got {len(request.payloads)}")
        headers = bytes(request.payloads[0])
        parts = [bytes(p) for p in request.payloads[1:]]
        if len(headers) != BATCH_HEADER.size * n:
            raise BadRequest(
                f"header frame is {len(headers)} bytes; {n} batches need {n * BATCH_HEADER.size}"
            )
        for i in range(n):
            header = BatchHeader.decode(headers, i * BATCH_HEADER.size)
            if header.length != len(parts[i]):
                raise BadRequest(f"batch {i} says another length than its frame's {len(parts[i])} bytes")
            if not digest_ok(header, parts[i]):
                raise BadRequest(f"batch {i} does not match its digest")
        replica_id = push.replica.worker_id if push.replica else None
        self.reservations.check_push(push.app_id, push.shuffle_id, push.batches, replica_id)
        replica = self.peers.get(replica_id) if replica_id else None
        if push.replica is not None and (replica is None or not replica.alive):
            raise Unavailable("replica unreachable", {"failed_worker": push.replica.worker_id})
        if replica is not None:
            replica.reservations.check_replicate(push.app_id, push.shuffle_id, push.batches)
        if (push.app_id, push.shuffle_id) in self.committed:
            raise StaleLocation(f"shuffle {push.app_id}/{push.shuffle_id} is already committed")
        for i, (partition, epoch) in enumerate(push.batches):
            raw = headers[i * BATCH_HEADER.size : (i + 1) * BATCH_HEADER.size]
            self._store((push.app_id, push.shuffle_id, partition, epoch, "primary"), raw + parts[i])
            if replica is not None:
                replica._store((push.app_id, push.shuffle_id, partition, epoch, "replica"), raw + parts[i])
        return {}

    def _store(self, key: Key, batch: bytes) -> None:
        with self.lock:
            self.data.setdefault(key, bytearray()).extend(batch)

    def _commit(self, body: CommitFiles) -> CommitFilesReply:
        locations = []
        with self.lock:
            self.committed.add((body.app_id, body.shuffle_id))
            for key, data in self.data.items():
                if key[:2] != (body.app_id, body.shuffle_id):
                    continue
                chunks, current = [], bytearray()
                seals: dict[tuple[int, int], int] = {}
                batches = 0
                for _, header, part in iter_batches(bytes(data)):
                    if header.is_seal:
                        seals[(header.map_id, header.attempt_id)] = header.batch_id
                    else:
                        batches += 1
                    current += header.encode() + bytes(part)
                    if len(current) >= self.chunk_size:
                        chunks.append(bytes(current))
                        current = bytearray()
                if current:
                    chunks.append(bytes(current))
                self.chunks[key] = chunks
                self.batch_counts[key] = batches
                locations.append(
                    LocationReport(
                        key[2],
                        key[3],
                        key[4],
                        ok=True,
                        bytes=len(data),
                        batches=batches,
                        chunks=len(chunks),
                        seals=tuple(sorted((m, a, n) for (m, a), n in seals.items())),
                    )
                )
        return CommitFilesReply(self.incarnation, tuple(locations))

    def _key(self, body: OpenStream | FetchChunk) -> Key:
        if body.incarnation != self.incarnation:
            raise StaleLocation(f"{self.worker_id} is incarnation {self.incarnation}")
        return (body.app_id, body.shuffle_id, body.partition, body.epoch, body.role)

    def _open(self, body: OpenStream) -> OpenStreamReply:
        key = self._key(body)
        with self.lock:
            if key not in self.chunks:
                if key in self.data:
                    raise NotCommitted("not committed")
                raise UnknownShuffle(f"no data for {key}")
            chunks = self.chunks[key]
            batches = self.batch_counts[key]
        offsets, pos = [], 0
        for c in chunks:
            offsets.append((pos, len(c)))
            pos += len(c)
        return OpenStreamReply(tuple(offsets), pos, batches)

    def _fetch(self, body: FetchChunk) -> tuple[FetchChunkReply, bytes]:
        key = self._key(body)
        with self.lock:
            chunks = self.chunks.get(key)
            if chunks is None:
                raise UnknownShuffle(f"no committed data for {key}")
            if body.chunk >= len(chunks):
                raise BadRequest(f"chunk {body.chunk} out of range: the location has {len(chunks)}")
            chunk = chunks[body.chunk]
            offset = sum(len(c) for c in chunks[: body.chunk])
        if self.corrupt:
            chunk = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
        return FetchChunkReply(offset, len(chunk)), chunk

    def _fetch_small(self, body: FetchSmall) -> tuple[FetchSmallReply, list[bytes]]:
        """Every location whole, as a worker does below its 1 MiB and 4 MiB limits."""
        if body.incarnation != self.incarnation:
            raise StaleLocation(f"{self.worker_id} is incarnation {self.incarnation}")
        entries: list[SmallLocation] = []
        payloads: list[bytes] = []
        with self.lock:
            self.small_requests += 1
            for partition, epoch, role in body.locations:
                key = (body.app_id, body.shuffle_id, partition, epoch, role)
                chunks = self.chunks.get(key)
                if chunks is None:
                    code = "NOT_COMMITTED" if key in self.data else "UNKNOWN_SHUFFLE"
                    entries.append(SmallLocation(code, message=f"no data for {key}"))
                    continue
                data = b"".join(chunks)
                if self.corrupt and data:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                entries.append(SmallLocation("ok", len(data), self.batch_counts[key]))
                payloads.append(data)
        return FetchSmallReply(tuple(entries)), payloads

    def _destroy(self, body: Destroy) -> DestroyReply:
        self.reservations.forget(body.app_id, body.shuffle_id)
        with self.lock:
            keys = [k for k in self.data if k[0] == body.app_id and body.shuffle_id in (None, k[1])]
            for k in keys:
                self.data.pop(k, None)
                self.chunks.pop(k, None)
                self.batch_counts.pop(k, None)
        return DestroyReply(len(keys))


class FakeCluster:
    """A master and ``n`` fake workers (``w0``..``w{n-1}``)."""

    def __init__(self, workers: int = 3, chunk_size: int = 2048, curve: CurveServer | None = None) -> None:
        self.curve = curve
        self.master = start_master(curve)
        self.master_url = self.master.url
        self.peers: dict[str, FakeWorker] = {}
        self.workers: list[FakeWorker] = []
        try:
            with MasterClient(self.master_url, timeout=5, curve=self._client_curve()) as client:
                for i in range(workers):
                    worker = FakeWorker(f"w{i}", self.peers, chunk_size, curve)
                    self.peers[worker.worker_id] = worker
                    self.workers.append(worker)
                    worker.register(client)
        except BaseException:
            self.stop()
            raise

    def _client_curve(self) -> CurveClient | None:
        return self.curve.client() if self.curve is not None else None

    def worker(self, worker_id: str) -> FakeWorker:
        return self.peers[worker_id]

    def lose(self, worker_id: str) -> None:
        """Crash a worker and tell the master (as its heartbeat timeout would)."""
        self.peers[worker_id].crash()
        with MasterClient(self.master_url, timeout=5, curve=self._client_curve()) as client:
            client.call(LoseWorker(worker_id, "crashed in a test"))

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.master.stop()


@contextmanager
def fake_cluster(
    workers: int = 3, chunk_size: int = 2048, curve: CurveServer | None = None
) -> Iterator[FakeCluster]:
    cluster = FakeCluster(workers, chunk_size, curve)
    try:
        yield cluster
    finally:
        cluster.stop()
