"""Wiring for one worker: storage, flushers, partition actors, the data plane and four ZeroMQ servers.

Ports (each a ROUTER, each bound to a free port unless told otherwise, and
reported to the master at registration):

    control    RESERVE, COMMIT_FILES, DESTROY, WORKER_INFO, PING   (from the master, admin)
    push       PUSH                                       (from writers; forwarded to the replica)
    replicate  REPLICATE                                  (from primaries)
    fetch      OPEN_STREAM, FETCH_CHUNK, FETCH_SMALL      (from readers)

What each request does lives in ``croupier.dataplane`` (push, reservations, commit, fetch,
control, orphans, registration, throttle); this module builds those parts, starts them and stops them. Every
process start gets a fresh incarnation id; committed files found on disk at start are
served under it.

Usage::

    with WorkerService("tcp://127.0.0.1:9097", dirs=["/data1", "/data2"]) as worker:
        ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import pykka

from croupier.actors.flusher import FlusherActor, FlushStats
from croupier.actors.partition_actor import Failures, PartitionActor
from croupier.core.commands import RegisterWorker, ReportOffload
from croupier.core.config import WorkerConfig
from croupier.core.dataplane import WorkerInfoReply, encode_reply
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError, StaleLocation
from croupier.core.replies import ChangedReply
from croupier.core.wire import MAX_CONTROL_FRAME_BYTES, MsgType
from croupier.dataplane.control import ControlHandler
from croupier.dataplane.fetch import FetchHandler
from croupier.dataplane.identity import Identity
from croupier.dataplane.load import DiskRoom, LoadSampler
from croupier.dataplane.locations import Locations
from croupier.dataplane.offload import OffloadedCopy, Offloader
from croupier.dataplane.orphans import OrphanSweep
from croupier.dataplane.overflow import OverflowStore, max_open_for
from croupier.dataplane.push import PushHandler
from croupier.dataplane.pushed import PushedBytes
from croupier.dataplane.registration import Registration
from croupier.dataplane.reservations import Reservations
from croupier.dataplane.split import SplitPolicy
from croupier.dataplane.throttle import AppThrottle
from croupier.ops.http import HttpEndpoint, parse_http, worker_routes
from croupier.ops.metrics import WorkerGauges, WorkerMetrics
from croupier.services._lifecycle import Service, raise_fd_limit
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.memory_tier import MemoryTier
from croupier.storage.store import LocationKey, PartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.auth import Signer, verifier_for
from croupier.transports.curve import CurveClient, CurveServer
from croupier.transports.master_client import MasterClient
from croupier.transports.objstore import open_object_store
from croupier.transports.rpc import Handler, RpcServer
from croupier.transports.secret import AppTags, ClusterSecret

__all__ = ["WorkerService", "raise_fd_limit"]

log = logging.getLogger(__name__)


class WorkerService(Service):
    """One worker process's parts.

    Parameters:
        master: the master URL.
        dirs: data directories (one flusher each); the worker id is kept in the first.
        host: the address to bind and advertise.
        config: slots, memory cap, flush and chunk sizes, heartbeat interval.
        worker_id: override the persistent id (tests).
        store: use this store instead of a ``DiskPartitionStore`` over ``dirs``.
        curve: serve CURVE on all four ports with this key pair, and talk CURVE to the
            master and to replicas (``--curve``).
        secret: the cluster secret: every request is checked (PROTOCOL §2.1; app requests
            against the app key derived from it), and registration, heartbeats and
            REPLICATE are member-signed. None (library use) accepts every request.
        http: ``HOST:PORT`` of the HTTP endpoint (``/metrics``, ``/api/v1/worker``; port 0 =
            any free port, reported to the master in heartbeats); None = no HTTP endpoint.
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
        curve: CurveServer | None = None,
        secret: ClusterSecret | None = None,
        http: str | None = None,
    ) -> None:
        self.curve = curve
        self._secret = secret
        self.metrics = WorkerMetrics()  # Prometheus, in a registry of its own (croupier.ops)
        self._http_listen = http
        self.http: HttpEndpoint | None = None
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
        cfg = self.config
        self.throttle = (  # abnormal-app throttling of PUSH; None when the window is 0
            AppThrottle(cfg.throttle_window, cfg.throttle_floor, cfg.throttle_z)
            if cfg.throttle_window > 0
            else None
        )
        self._locations = Locations(self.limiter)
        # small committed copies kept in memory; their bytes are held state of the limiter
        self.tier = MemoryTier(
            cfg.memory_tier_max, int(cfg.memory_cap * max(0.0, cfg.memory_tier_fraction)), self.limiter
        )
        self._failures = Failures()  # locations whose disks failed (issue 15)
        self._reservations = Reservations(Identity(self.worker_id, self.incarnation), limiter=self.limiter)
        self._pushed = PushedBytes()  # bytes in flight per shuffle, for the tenants' quotas
        # soft and hard splits; hooks (a disk past its reserve) go in with ``split.add_hard``
        self.split = SplitPolicy(cfg.split_threshold)
        # set once the master reports this worker decommissioned and drained: it may exit
        self.drained = threading.Event()
        self._on_disk: set[tuple[str, int]] = set()
        self._found: list[LocationKey] = []  # committed copies found at start, for the offload
        self._app_tags = AppTags()  # the key tag of each app reserved or kept here (PROTOCOL §2.1)
        self._flushers: list[pykka.ActorRef[FlusherActor]] = []
        self._load: LoadSampler | None = None
        self._room: DiskRoom | None = None
        self._replicator: AsyncRpcClient | None = None
        self._fetch: FetchHandler | None = None
        self._control: ControlHandler | None = None
        self.offloader: Offloader | None = None
        self._servers: dict[str, RpcServer] = {}
        self._registration: Registration | None = None
        self._flush_stats: list[FlushStats] = []

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
        """Open the store, start the actors and the servers, then register with the master.

        Raises:
            CroupierError: the store cannot be opened or a port cannot be bound (all stopped again).
        """
        try:
            raise_fd_limit()
            store = self._start_storage()
            self._locations.open(self.config.partition_actors, self._start_partition_actor)
            self._replicator = AsyncRpcClient(
                timeout=self.config.replicate_timeout,
                name="replicator",
                curve=self._client_curve(),
                signer=Signer.member(self._secret),
            )
            self._replicator.start()
            identity = Identity(self.worker_id, self.incarnation)
            push = self._push_handler(identity, self._replicator)
            self._fetch, self._control = self._fetch_and_control(identity, store)
            self._serve(
                "control",
                self._control.on_control,
                MsgType.RESERVE,
                MsgType.COMMIT_FILES,
                MsgType.DESTROY,
                MsgType.WORKER_INFO,
                MsgType.PING,
            )
            self._serve("push", push.on_push, MsgType.PUSH)
            self._serve("replicate", push.on_replicate, MsgType.REPLICATE)
            self._serve(
                "fetch", self._fetch.on_fetch, MsgType.OPEN_STREAM, MsgType.FETCH_CHUNK, MsgType.FETCH_SMALL
            )
            self._start_http()
            self._registration = self._registration_with_master()
            self._registration.start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "worker %s (incarnation %s) serving %s%s",
            self.worker_id,
            self.incarnation,
            self.urls,
            " with CURVE" if self.curve is not None else "",
        )
        return self

    def _push_handler(self, identity: Identity, replicator: AsyncRpcClient) -> PushHandler:
        return PushHandler(
            identity,
            self._locations,
            self._reservations,
            self.limiter,
            replicator,
            self._pushed,
            throttle=self.throttle,
            secret=self._secret,
            app_tags=self._app_tags,
            split=self.split,
            failures=self._failures,
            ample=self._room.ample if self._room is not None else None,
        )

    def _fetch_and_control(
        self, identity: Identity, store: PartitionStore
    ) -> tuple[FetchHandler, ControlHandler]:
        """The fetch port's handler and the control port's, both over the store and the memory tier."""
        fetch = FetchHandler(identity, self._locations, store, tier=self.tier)
        control = ControlHandler(
            self._locations,
            self._reservations,
            store,
            self.incarnation,
            self._info,
            pushed=self._pushed,
            split=self.split,
            tier=self.tier,
            app_tags=self._app_tags,
            offloader=self._offloader(store),
        )
        return fetch, control

    def _offloader(self, store: PartitionStore) -> Offloader | None:
        """The object-store offload (issue 26), when ``--object-store`` names a store."""
        if self.config.object_store is None:
            return None
        master = MasterClient(
            self._master_url,
            timeout=10.0,
            attempts=3,
            curve=self._client_curve(),
            signer=Signer.member(self._secret),
        )

        def report(copy: OffloadedCopy) -> None:
            """Each uploaded copy becomes a CopiesOffloaded event in the master's log."""
            k = copy.key
            entry = (k.partition, k.epoch, str(k.role), copy.size, copy.digest)
            master.request(ReportOffload(self.worker_id, k.app_id, k.shuffle_id, (entry,)), ChangedReply)

        self.offloader = Offloader(
            open_object_store(self.config.object_store),
            store,
            on_offloaded=report,
            on_close=master.close,
            already=store.offloaded if isinstance(store, OverflowStore) else None,
        )
        # copies committed before a restart may not have been offloaded: those found on disk
        # are submitted again (one already in the store is only reported)
        self.offloader.submit(self._found, found=True)
        self._found = []
        return self.offloader

    def _start_storage(self) -> PartitionStore:
        """The store, one flusher per disk and the load sampler over them."""
        store = self.store = self._given_store or DiskPartitionStore(
            self.dirs,
            fsync=self.config.commit_fsync,
            reserve=self.config.disk_reserve,
            direct=self.config.direct_io,
        )
        if self.config.object_store is not None:  # full disks spill to the object store (issue 26)
            objects = open_object_store(self.config.object_store)
            store = self.store = OverflowStore(store, objects, max_open=max_open_for(self.config.memory_cap))
        self._room = DiskRoom(store.dir_states, self.config.memory_cap)
        committed = store.scan()
        if committed:
            log.info("serving %d committed locations found on disk", len(committed))
        self._on_disk = {(cf.key.app_id, cf.key.shuffle_id) for cf in committed}
        self._found = [cf.key for cf in committed]
        self._load_key_tags(store)
        stats = self._flush_stats = [FlushStats() for _ in range(store.num_disks)]
        self._flushers = [FlusherActor.start(i, self.limiter, stats[i]) for i in range(store.num_disks)]
        # a given store's disks need not be self.dirs: then only the flushers' busy time counts
        self._load = LoadSampler(
            self.dirs if self._given_store is None else [], lambda: [s.busy_seconds for s in stats]
        )
        return store

    def _load_key_tags(self, store: PartitionStore) -> None:
        """The key tags kept beside the committed files found at start (PROTOCOL §2.1, §5.4)."""
        for app in sorted({app for app, _ in self._on_disk}):
            tag = store.key_tag(app)
            if tag is not None:
                self._app_tags.set(app, tag)
            else:
                log.warning("app %s has no key tag on disk: its files are refused until it is sent", app)

    def _start_partition_actor(self) -> pykka.ActorRef[PartitionActor]:
        assert self.store is not None
        return PartitionActor.start(
            self.store,
            self._flushers,
            self.limiter,
            flush_bytes=self.config.flush_threshold,
            chunk_size=self.config.chunk_size,
            failures=self._failures,
        )

    def _unknown_app(self, msg_type: int, app_id: str) -> CroupierError:
        """The answer to a request signed by an app with nothing reserved here in this life."""
        return StaleLocation(
            f"worker {self.worker_id} (incarnation {self.incarnation}) holds nothing of app {app_id}",
            {"worker_id": self.worker_id, "incarnation": self.incarnation},
        )

    def _serve(self, name: str, handler: Handler, *types: MsgType) -> None:
        # only push and replicate carry batches; control and fetch requests are small JSON
        data_port = name in ("push", "replicate")
        server = RpcServer(
            f"tcp://{self.host}:0",
            self.metrics.watch(name, handler),
            name=f"worker-{name}",
            allowed_types=[int(t) for t in types],
            max_message_bytes=self.config.max_message_bytes if data_port else MAX_CONTROL_FRAME_BYTES,
            max_peer_reply_bytes=self.config.max_peer_reply_bytes,
            curve=self.curve,
            verifier=verifier_for(self._secret, app_tags=self._app_tags.get, unknown_app=self._unknown_app),
        )
        server.start()
        self._servers[name] = server

    def _registration_with_master(self) -> Registration:
        register = RegisterWorker(
            self.worker_id,
            self.host,
            self.port("control"),
            self.port("push"),
            self.port("replicate"),
            self.port("fetch"),
            self.config.slots,
            self.incarnation,
        )
        load = self._load
        assert self._control is not None
        orphans = OrphanSweep(self._reservations, self._locations, self._on_disk, self._control.drop_orphan)
        return Registration(
            MasterClient(
                self._master_url,
                timeout=10.0,
                attempts=3,
                curve=self._client_curve(),
                signer=Signer.member(self._secret),
            ),
            register,
            interval=self.config.heartbeat_interval,
            sample_load=load.sample if load is not None else lambda: (0.0, 0.0),
            pending_flush=self.limiter.level,
            orphans=orphans,
            pushed=self._pushed,
            on_status=self._on_status,
            dirs=self._room.states if self._room is not None else None,
            http_port=self.http.port if self.http is not None else None,
            overflow=isinstance(self.store, OverflowStore),
        )

    def _on_status(self, status: str) -> None:
        """The master's view of this worker: decommissioning makes every PUSH ``HARD_SPLIT``."""
        leaving = status in (WorkerStatus.DECOMMISSIONING, WorkerStatus.DRAINED)
        if leaving and not self.split.decommissioning:
            log.warning("worker %s is decommissioning: pushes are answered HARD_SPLIT", self.worker_id)
        self.split.decommission(leaving)
        if status == WorkerStatus.DRAINED and not self.drained.is_set():
            log.warning("worker %s is drained: no registered shuffle holds a slot here", self.worker_id)
            self.drained.set()

    def _start_http(self) -> None:
        """The metrics' gauges, then the HTTP endpoint if asked for."""
        limiter, throttle = self.limiter, self.throttle
        flushers = self._flush_stats
        self.metrics.collect(
            WorkerGauges(
                memory=lambda: (limiter.used, limiter.cap, limiter.peak, limiter.held, limiter.congested),
                locations=lambda: len(self._locations),
                flush=lambda: [(s.bytes_written, s.busy_seconds, s.writes) for s in flushers],
                dirs=list(self.dirs),
                connections=lambda: {n: s.connections.live for n, s in list(self._servers.items())},
                throttled=lambda: (
                    {a: r for a, (r, _z) in dict(throttle.throttled).items()} if throttle else {}
                ),
                load=lambda: dict(self.load),
                offload=self._offload_figures,
            )
        )
        if self._http_listen is not None:
            host, port = parse_http(self._http_listen)
            routes = worker_routes(self.metrics.registry, self.http_info)
            self.http = HttpEndpoint(host, port, routes, name="worker-http").start()

    def http_info(self) -> dict[str, Any]:
        """``/api/v1/worker``: this worker's figures for the status page and scripts."""
        limiter = self.limiter
        dirs = []
        for d in self.dirs:
            try:
                usage = shutil.disk_usage(d)
            except OSError:
                dirs.append({"dir": str(d), "healthy": False})
                continue
            dirs.append(
                {"dir": str(d), "used": usage.used, "free": usage.free, "total": usage.total, "healthy": True}
            )
        return {
            "worker_id": self.worker_id,
            "incarnation": self.incarnation,
            "memory": {"used": limiter.used, "cap": limiter.cap, "peak": limiter.peak, "held": limiter.held},
            "congested": self.metrics.congested_now(),
            "active_locations": len(self._locations),
            "bytes": self.metrics.bytes_by_port(),
            "latency": self.metrics.quantiles(),
            "dirs": dirs,
            "throttled": sorted(self.throttle.throttled) if self.throttle is not None else [],
            "load": self.load,
            "offload": self.offloader.stats() if self.offloader is not None else None,
            "overflow": self.store.stats() if isinstance(self.store, OverflowStore) else None,
        }

    def _offload_figures(self) -> dict[str, float]:
        """The offload's gauges, and the overflow's as ``overflow_*`` (issue 26)."""
        figures = self.offloader.stats() if self.offloader is not None else {}
        if isinstance(self.store, OverflowStore):
            figures.update({f"overflow_{k}": v for k, v in self.store.stats().items()})
        return figures

    def _client_curve(self) -> CurveClient | None:
        return self.curve.client() if self.curve is not None else None

    @property
    def urls(self) -> dict[str, str]:
        """Each port's name (control, push, replicate, fetch) and its bound endpoint."""
        return {name: server.url for name, server in self._servers.items()}

    def port(self, name: str) -> int:
        """The bound port of the server ``name``."""
        return int(self._servers[name].url.rsplit(":", 1)[1])

    @property
    def load(self) -> dict[str, float]:
        """The ``disk_util`` and ``io_wait`` sent with the last heartbeat."""
        if self._registration is None:
            return {"disk_util": 0.0, "io_wait": 0.0}
        return self._registration.load

    def info(self) -> dict[str, Any]:
        """The WORKER_INFO reply body."""
        return encode_reply(self._info())

    def _info(self) -> WorkerInfoReply:
        load = self.load
        return WorkerInfoReply(
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            urls=self.urls,
            live_locations=len(self._locations),
            memory_used=self.limiter.used,
            memory_peak=self.limiter.peak,
            memory_cap=self.limiter.cap,
            congested=self.limiter.congested,
            disk_util=load["disk_util"],
            io_wait=load["io_wait"],
        )

    def stop(self) -> None:
        """Stop serving and release everything. Idempotent. Uncommitted data is dropped."""
        if self._registration is not None:
            self._registration.stop()
            self._registration = None
        if self.http is not None:
            self.http.stop()
            self.http = None
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
        if self._control is not None:  # after its server: no destroy starts any more
            self._control.close()
            self._control = None
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
        if self._fetch is not None:
            self._fetch.close()
            self._fetch = None
        self.tier.clear()
        if self.store is not None and self._given_store is None:
            self.store.close()
        elif isinstance(self.store, OverflowStore):  # a given store stays open; the bucket's connections go
            self.store.objects.close()
        self.store = None
