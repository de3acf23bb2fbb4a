"""Wiring for one worker: storage, flushers, partition actors and four ZeroMQ servers.

Ports (each a ROUTER, each bound to a free port unless told otherwise, and
reported to the master at registration):

    control    COMMIT_FILES, DESTROY, WORKER_INFO, PING   (from the master, admin)
    push       PUSH                                       (from writers; forwarded to the replica)
    replicate  REPLICATE                                  (from primaries)
    fetch      OPEN_STREAM, FETCH_CHUNK                   (from readers)

A push is acknowledged only when its batches are in memory here *and* the
replica answered its REPLICATE (write-ahead memory replication, DESIGN §7).
Every process start gets a fresh incarnation id; requests naming another one
get ``STALE_LOCATION``. Committed files found on disk at start are served under
the new incarnation.

Usage::

    with WorkerService("tcp://127.0.0.1:9097", dirs=["/data1", "/data2"]) as worker:
        ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import pykka

from croupier.actors.flusher import FlusherActor, FlushStats
from croupier.actors.partition_actor import (
    Append,
    Batches,
    Commit,
    CommitReport,
    Drop,
    PartitionActor,
    shard_of,
)
from croupier.core.batch import BATCH_HEADER, BatchHeader
from croupier.core.codec import from_json, to_json
from croupier.core.commands import RegisterWorker, WorkerHeartbeat
from croupier.core.config import WorkerConfig
from croupier.core.dataplane import (
    PRIMARY,
    REPLICA,
    CommitFiles,
    Destroy,
    FetchChunk,
    OpenStream,
    Push,
    Replicate,
)
from croupier.core.errors import (
    BadRequest,
    Congested,
    CroupierError,
    NotCommitted,
    StaleLocation,
    Unavailable,
    UnknownShuffle,
    UnknownWorker,
)
from croupier.core.wire import MsgType
from croupier.services._lifecycle import Service
from croupier.services.load import LoadSampler
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.store import LocationKey, PartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.limiter import MemoryLimiter
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import Reply, Request, Responder, RpcServer

__all__ = ["WorkerService"]

log = logging.getLogger(__name__)


def raise_fd_limit() -> int:
    """DESIGN §11: a worker may host thousands of locations; take the hard limit of descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
    return soft


class _Locations:
    """The worker's locations and the ``PartitionActor`` owning each; shared by the server threads.

    With ``shards`` > 0 a fixed set of actors (started here) owns the locations by
    key hash; with 0 every location gets its own actor, started on first use.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start: Callable[[], pykka.ActorRef[PartitionActor]] | None = None
        self._shards: list[pykka.ActorRef[PartitionActor]] = []
        self._owners: dict[LocationKey, pykka.ActorRef[PartitionActor]] = {}
        self._committing: set[tuple[str, int]] = set()  # commit started: no more pushes for the shuffle

    def open(self, shards: int, start: Callable[[], pykka.ActorRef[PartitionActor]]) -> None:
        """Start ``shards`` actors now (0: one per location, started by ``admit``)."""
        with self._lock:
            self._start = start
            for _ in range(shards):
                self._shards.append(start())

    def get(self, key: LocationKey) -> pykka.ActorRef[PartitionActor] | None:
        with self._lock:
            return self._owners.get(key)

    def admit(self, key: LocationKey) -> pykka.ActorRef[PartitionActor]:
        """The owner of ``key``, a live location; none once its shuffle started committing here."""
        with self._lock:
            if (key.app_id, key.shuffle_id) in self._committing:
                raise StaleLocation(
                    f"shuffle {key.app_id}/{key.shuffle_id} is committed here; {key.name} takes no more data"
                )
            ref = self._owners.get(key)
            if ref is not None:
                return ref
            if self._shards:
                ref = self._shards[shard_of(key, len(self._shards))]
            else:
                assert self._start is not None, "the worker is not started"
                ref = self._start()
            self._owners[key] = ref
            return ref

    def deliver(self, groups: list[tuple[LocationKey, Batches, int]]) -> int:
        """Tell each owner its locations' batches, in one ``Append``; returns the bytes of
        locations destroyed since they were admitted (nobody will read them)."""
        unwanted = 0
        with self._lock:  # ordered against the Drop of ``remove``
            owners: dict[pykka.ActorRef[PartitionActor], list[tuple[LocationKey, Batches, int]]] = {}
            for group in groups:
                owner = self._owners.get(group[0])
                if owner is None:
                    unwanted += group[2]
                else:
                    owners.setdefault(owner, []).append(group)
            for owner, mine in owners.items():
                owner.tell(Append(mine))
        return unwanted

    def of_shuffle(
        self, app_id: str, shuffle_id: int, *, seal: bool
    ) -> dict[pykka.ActorRef[PartitionActor], list[LocationKey]]:
        """The shuffle's locations by owner; with ``seal``, no new location of it is admitted."""
        with self._lock:
            if seal:
                self._committing.add((app_id, shuffle_id))
            keys = [k for k in self._owners if k.app_id == app_id and k.shuffle_id == shuffle_id]
            return self._by_owner(keys)

    def remove(self, app_id: str, shuffle_id: int | None) -> list[pykka.Future[Any]]:
        """Drop the locations of a shuffle (or of every shuffle of an app); the futures are done
        when their owners have forgotten them (after every ``Append`` delivered before)."""
        done: list[pykka.Future[Any]] = []
        with self._lock:
            keys = [k for k in self._owners if k.app_id == app_id and shuffle_id in (None, k.shuffle_id)]
            self._committing = {
                s for s in self._committing if not (s[0] == app_id and shuffle_id in (None, s[1]))
            }
            for owner, mine in self._by_owner(keys).items():
                with contextlib.suppress(pykka.ActorDeadError):
                    done.append(owner.ask(Drop(mine), block=False))
                    if not self._shards:
                        owner.stop(block=False)
            for k in keys:
                del self._owners[k]
        return done

    def _by_owner(self, keys: list[LocationKey]) -> dict[pykka.ActorRef[PartitionActor], list[LocationKey]]:
        owners: dict[pykka.ActorRef[PartitionActor], list[LocationKey]] = {}
        for k in keys:
            owners.setdefault(self._owners[k], []).append(k)
        return owners

    def all(self) -> list[pykka.ActorRef[PartitionActor]]:
        """Every actor, forgetting every location (at stop)."""
        with self._lock:
            refs = list({id(r): r for r in [*self._shards, *self._owners.values()]}.values())
            self._owners.clear()
            self._shards = []
            self._start = None
            return refs

    def __len__(self) -> int:
        return len(self._owners)


class WorkerService(Service):
    """One worker process's parts.

    Parameters:
        master: the master URL.
        dirs: data directories (one flusher each); the worker id is kept in the first.
        host: the address to bind and advertise.
        config: slots, memory cap, flush and chunk sizes, heartbeat interval.
        worker_id: override the persistent id (tests).
        store: use this store instead of a ``DiskPartitionStore`` over ``dirs``.
    """

    def __init__(
        self,
        master: str,
        dirs: Sequence[str | os.PathLike[str]],
        *,
        host: str = "127.0.0.1",
        config: WorkerConfig | None = None,
        worker_id: str | None = None,
        store: PartitionStore | None = None,
    ) -> None:
        if not dirs and store is None:
            raise ValueError("a worker needs at least one data directory")
        self.config = config or WorkerConfig()
        self.host = host
        self.dirs = [Path(d) for d in dirs]
        self.incarnation = uuid.uuid4().hex[:16]
        self.worker_id = worker_id or self._persistent_id()
        self._master_url = master
        self._given_store = store
        self.store: PartitionStore | None = None
        self.limiter = MemoryLimiter(self.config.memory_cap)
        self._locations = _Locations()
        self._flushers: list[pykka.ActorRef[FlusherActor]] = []
        self._servers: dict[str, RpcServer] = {}
        self._replicator: AsyncRpcClient | None = None
        self._reads: ThreadPoolExecutor | None = None
        self._load: LoadSampler | None = None
        self.load: dict[str, float] = {"disk_util": 0.0, "io_wait": 0.0}  # as last sent to the master
        self._master: MasterClient | None = None
        self._heartbeat: threading.Thread | None = None
        self._stopping = threading.Event()
        self._registered = threading.Event()

    def _persistent_id(self) -> str:
        if not self.dirs:
            return f"worker-{uuid.uuid4().hex[:12]}"
        self.dirs[0].mkdir(parents=True, exist_ok=True)
        path = self.dirs[0] / "WORKER_ID"
        if path.exists():
            return path.read_text().strip()
        wid = f"worker-{uuid.uuid4().hex[:12]}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(wid + "\n")
        os.replace(tmp, path)
        return wid

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Self:
        try:
            raise_fd_limit()
            self.store = self._given_store or DiskPartitionStore(self.dirs, fsync=self.config.commit_fsync)
            committed = self.store.scan()
            if committed:
                log.info("serving %d committed locations found on disk", len(committed))
            stats = [FlushStats() for _ in range(self.store.num_disks)]
            self._flushers = [
                FlusherActor.start(i, self.limiter, stats[i]) for i in range(self.store.num_disks)
            ]
            # a given store's disks need not be self.dirs: then only the flushers' busy time counts
            self._load = LoadSampler(
                self.dirs if self._given_store is None else [], lambda: [s.busy_seconds for s in stats]
            )
            self._locations.open(self.config.partition_actors, self._start_partition_actor)
            self._replicator = AsyncRpcClient(timeout=self.config.replicate_timeout, name="replicator")
            self._replicator.start()
            self._reads = ThreadPoolExecutor(4, thread_name_prefix="fetch-read")
            handlers = {
                "control": (
                    self._on_control,
                    [MsgType.COMMIT_FILES, MsgType.DESTROY, MsgType.WORKER_INFO, MsgType.PING],
                ),
                "push": (self._on_push, [MsgType.PUSH]),
                "replicate": (self._on_replicate, [MsgType.REPLICATE]),
                "fetch": (self._on_fetch, [MsgType.OPEN_STREAM, MsgType.FETCH_CHUNK]),
            }
            for name, (handler, types) in handlers.items():
                server = RpcServer(
                    f"tcp://{self.host}:0",
                    handler,
                    name=f"worker-{name}",
                    allowed_types=[int(t) for t in types],
                    max_message_bytes=self.config.max_message_bytes,
                )
                server.start()
                self._servers[name] = server
            self._master = MasterClient(self._master_url, timeout=10.0, attempts=3)
            self._heartbeat = threading.Thread(
                target=self._heartbeat_loop, name="worker-heartbeat", daemon=True
            )
            self._heartbeat.start()
        except BaseException:
            self.stop()
            raise
        log.info("worker %s (incarnation %s) serving %s", self.worker_id, self.incarnation, self.urls)
        return self

    @property
    def urls(self) -> dict[str, str]:
        return {name: server.url for name, server in self._servers.items()}

    def port(self, name: str) -> int:
        return int(self._servers[name].url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Stop serving and release everything. Idempotent. Uncommitted data is dropped."""
        self._stopping.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
        if self._replicator is not None:
            self._replicator.stop()
            self._replicator = None
        for ref in self._locations.all():
            with contextlib.suppress(pykka.ActorDeadError):
                ref.stop(block=True)
        for flusher in self._flushers:
            with contextlib.suppress(pykka.ActorDeadError):
                flusher.stop(block=True)
        self._flushers = []
        if self._reads is not None:
            self._reads.shutdown(wait=True, cancel_futures=True)
            self._reads = None
        if self._master is not None:
            self._master.close()
            self._master = None
        if self.store is not None and self._given_store is None:
            self.store.close()
        self.store = None

    # -- master ---------------------------------------------------------------------------
    def _register(self) -> None:
        assert self._master is not None
        self._master.call(
            RegisterWorker(
                self.worker_id,
                self.host,
                self.port("control"),
                self.port("push"),
                self.port("replicate"),
                self.port("fetch"),
                self.config.slots,
                self.incarnation,
            )
        )
        self._registered.set()
        log.info("registered with the master as %s", self.worker_id)

    def _heartbeat_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self._registered.is_set():
                    self._register()
                else:
                    assert self._master is not None
                    disk_util, io_wait = self._load.sample() if self._load is not None else (0.0, 0.0)
                    self.load = {"disk_util": round(disk_util, 3), "io_wait": round(io_wait, 3)}
                    self._master.call(
                        WorkerHeartbeat(
                            self.worker_id,
                            self.incarnation,
                            disk_util=disk_util,
                            io_wait=io_wait,
                            pending_flush=min(1.0, self.limiter.level()),
                        )
                    )
            except UnknownWorker:
                log.warning("the master does not know this incarnation; registering again")
                self._registered.clear()
                continue
            except CroupierError as exc:
                log.warning("master unreachable: %s", exc)
            self._stopping.wait(self.config.heartbeat_interval if self._registered.is_set() else 0.5)

    # -- push and replicate ---------------------------------------------------------------
    def _parse_batches(
        self, request: Request, pairs: tuple[tuple[int, int], ...]
    ) -> tuple[list[tuple[tuple[int, int], BatchHeader, memoryview, memoryview]], int]:
        n = len(pairs)
        if len(request.payloads) != n + 1:
            raise BadRequest(f"{n} batches need {n + 1} payload frames, got {len(request.payloads)}")
        headers = request.payloads[0]
        if len(headers) != n * BATCH_HEADER.size:
            raise BadRequest(
                f"header frame is {len(headers)} bytes; {n} batches need {n * BATCH_HEADER.size}"
            )
        out = []
        total = 0
        for i, pe in enumerate(pairs):
            view = headers[i * BATCH_HEADER.size : (i + 1) * BATCH_HEADER.size]
            header = BatchHeader.decode(view)
            data = request.payloads[i + 1]
            if header.length != len(data):
                raise BadRequest(f"batch {i} says {header.length} bytes but its frame has {len(data)}")
            out.append((pe, header, view, data))
            total += BATCH_HEADER.size + len(data)
        return out, total

    def _accept(
        self,
        app_id: str,
        shuffle_id: int,
        role: str,
        batches: list[tuple[tuple[int, int], BatchHeader, memoryview, memoryview]],
        total: int,
    ) -> None:
        groups: dict[LocationKey, list[tuple[BatchHeader, memoryview, memoryview]]] = {}
        sizes: dict[LocationKey, int] = {}
        for (partition, epoch), header, view, data in batches:
            key = LocationKey(app_id, shuffle_id, partition, epoch, role)
            groups.setdefault(key, []).append((header, view, data))
            sizes[key] = sizes.get(key, 0) + BATCH_HEADER.size + len(data)
        for key in groups:
            self._locations.admit(key)
        if not self.limiter.try_acquire(total, replicate=role == REPLICA):
            raise Congested(
                f"worker {self.worker_id} holds {self.limiter.used} of {self.limiter.cap} buffered bytes;"
                " retry later"
            )
        unwanted = self._locations.deliver([(key, items, sizes[key]) for key, items in groups.items()])
        self.limiter.release(unwanted)

    def _start_partition_actor(self) -> pykka.ActorRef[PartitionActor]:
        assert self.store is not None
        return PartitionActor.start(
            self.store,
            self._flushers,
            self.limiter,
            flush_bytes=self.config.flush_threshold,
            chunk_size=self.config.chunk_size,
        )

    def _check_incarnation(self, incarnation: str) -> None:
        if incarnation != self.incarnation:
            raise StaleLocation(
                f"worker {self.worker_id} is incarnation {self.incarnation}, not {incarnation}: "
                "it restarted and lost what it held in memory",
                {"worker_id": self.worker_id, "incarnation": self.incarnation},
            )

    def _on_push(self, request: Request, responder: Responder) -> None:
        push = from_json(Push, request.body)
        push.validate()
        # the shape first (BAD_REQUEST), then whether it is meant for this incarnation
        batches, total = self._parse_batches(request, push.batches)
        self._check_incarnation(push.incarnation)
        if push.replica is not None and push.replica.worker_id == self.worker_id:
            raise BadRequest("the replica must be another worker")
        self._accept(push.app_id, push.shuffle_id, PRIMARY, batches, total)
        if push.replica is None:
            responder.ok({})
            return
        replica = push.replica
        body = to_json(Replicate(push.app_id, push.shuffle_id, replica.incarnation, push.batches))

        def replicated(reply: Reply | None, error: CroupierError | None) -> None:
            if error is None:
                responder.ok({})
            elif isinstance(error, Congested):
                responder.error(error)
            else:
                responder.error(
                    Unavailable(
                        f"replication to {replica.worker_id} ({replica.url}) failed:"
                        f" {error.code}: {error.message}",
                        {"failed_worker": replica.worker_id},
                    )
                )

        assert self._replicator is not None
        self._replicator.send(replica.url, MsgType.REPLICATE, body, request.payloads, replicated)

    def _on_replicate(self, request: Request, responder: Responder) -> None:
        rep = from_json(Replicate, request.body)
        rep.validate()
        batches, total = self._parse_batches(request, rep.batches)
        self._check_incarnation(rep.incarnation)
        self._accept(rep.app_id, rep.shuffle_id, REPLICA, batches, total)
        responder.ok({})

    # -- control --------------------------------------------------------------------------
    def _on_control(self, request: Request, responder: Responder) -> None:
        if request.msg_type == MsgType.COMMIT_FILES:
            cmd = from_json(CommitFiles, request.body)
            cmd.validate()
            self._commit(cmd, responder)
        elif request.msg_type == MsgType.DESTROY:
            destroy = from_json(Destroy, request.body)
            destroy.validate()
            for dropped in self._locations.remove(destroy.app_id, destroy.shuffle_id):
                # no flush of the shuffle starts after this, so none recreates a removed file
                with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                    dropped.get(timeout=10.0)
            assert self.store is not None
            removed = self.store.remove(destroy.app_id, destroy.shuffle_id)
            log.info("destroyed %s/%s: %d locations", destroy.app_id, destroy.shuffle_id, removed)
            responder.ok({"removed": removed})
        else:
            responder.ok(self.info())

    def info(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "incarnation": self.incarnation,
            "urls": self.urls,
            "live_locations": len(self._locations),
            "memory_used": self.limiter.used,
            "memory_peak": self.limiter.peak,
            "memory_cap": self.limiter.cap,
            "congested": self.limiter.congested,
            **self.load,
        }

    def _commit(self, cmd: CommitFiles, responder: Responder) -> None:
        assert self.store is not None
        owners = self._locations.of_shuffle(cmd.app_id, cmd.shuffle_id, seal=True)
        live = {key for keys in owners.values() for key in keys}
        reports: list[CommitReport] = []
        lock = threading.Lock()
        remaining = [len(live)]

        def finish() -> None:
            # committed files of this shuffle not held by a live actor (found at start-up, or earlier)
            assert self.store is not None
            for cf in self.store.scan(cmd.app_id, cmd.shuffle_id):
                k = cf.key
                if k not in live:
                    reports.append(
                        {
                            "partition": k.partition,
                            "epoch": k.epoch,
                            "role": k.role,
                            "ok": True,
                            "bytes": cf.index.size,
                            "batches": cf.index.batches,
                            "chunks": len(cf.index.chunks),
                            "seals": [list(s) for s in cf.index.seals],
                        }
                    )
            responder.ok({"incarnation": self.incarnation, "locations": reports})

        def done(report: CommitReport) -> None:
            with lock:
                reports.append(report)
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                finish()

        if not live:
            finish()
            return
        for ref, keys in owners.items():
            ref.tell(Commit(keys, done))

    # -- fetch ----------------------------------------------------------------------------
    def _committed(self, body: OpenStream | FetchChunk) -> Any:
        self._check_incarnation(body.incarnation)
        assert self.store is not None
        key = LocationKey(body.app_id, body.shuffle_id, body.partition, body.epoch, body.role)
        committed = self.store.committed(key)
        if committed is None:
            if self._locations.get(key) is not None:
                raise NotCommitted(
                    f"location {body.app_id}/{body.shuffle_id}/{key.name} is not committed yet"
                )
            raise UnknownShuffle(
                f"worker {self.worker_id} holds no data for {body.app_id}/{body.shuffle_id}/{key.name}"
            )
        return committed

    def _on_fetch(self, request: Request, responder: Responder) -> None:
        if request.msg_type == MsgType.OPEN_STREAM:
            stream = from_json(OpenStream, request.body)
            stream.validate()
            cf = self._committed(stream)
            responder.ok(
                {
                    "chunks": [list(c) for c in cf.index.chunks],
                    "bytes": cf.index.size,
                    "batches": cf.index.batches,
                }
            )
            return
        fetch = from_json(FetchChunk, request.body)
        fetch.validate()
        cf = self._committed(fetch)
        if fetch.chunk >= len(cf.index.chunks):
            raise BadRequest(f"chunk {fetch.chunk} out of range: the location has {len(cf.index.chunks)}")
        offset, length = cf.index.chunks[fetch.chunk]
        store = self.store
        assert store is not None and self._reads is not None

        def read() -> None:
            try:
                data = store.read(cf.key, offset, length)
                responder.ok({"offset": offset, "length": length}, [data])
            except CroupierError as exc:
                responder.error(exc)
            except Exception as exc:
                log.exception("read of %s failed", cf.key)
                responder.error(Unavailable(f"read failed: {exc}"))

        self._reads.submit(read)
