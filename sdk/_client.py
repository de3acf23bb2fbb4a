"""``connect``, ``Client``, ``App`` and ``Shuffle``: the SDK's entry points (DESIGN §12).

State:
    ``Client``  a ``MasterClient`` (thread-safe) and, once a writer or reader
                needs it, one ``AsyncRpcClient`` thread for the data plane,
                shared by every writer and reader of the client; the apps it
                registered (their heartbeat threads stop on ``close``).
    ``App``     one daemon thread sending ``AppHeartbeat`` every
                ``app_heartbeat_interval`` until ``unregister`` or ``close``.
    ``Shuffle`` its sizes and a ``Routing`` (partition -> current location)
                shared by its writers.

Usage::

    with croupier.connect("tcp://127.0.0.1:9097") as client:
        app = client.register_app("etl-nightly")
        sh = app.register_shuffle(num_mappers=4, num_partitions=16)
        with sh.writer(map_id=0, attempt_id=0) as w:
            w.write(3, b"one record")
        for record in sh.reader(3):
            ...
        app.unregister()

A shuffle's **handle** (``Shuffle.handle()``) is how another process opens it: the string
``croupier-shuffle-v1:<app_id>:<shuffle_id>:<app key>``, the app key as 64 lowercase hex
digits (empty on a cluster without a secret). It carries the app's key, so it is a
credential: whoever holds it can read and write the app's shuffles. Pass it to
``croupier.connect(url).open_shuffle(handle)``.

An app's **handle** (``App.handle()``) is how another process takes the app over, for
instance after its driver died: the string ``croupier-app-v1:<app_id>:<app key>``, the key
as in a shuffle handle. ``croupier.connect(url).attach(handle)`` checks it with one
heartbeat and then sends the app's heartbeats from the new process, which can register
shuffles, open the app's shuffles by id, write, read and unregister. The app lives as long
as some process heartbeats it within the master's ``--app-timeout``.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, overload

from croupier._handles import APP_HANDLE_PREFIX, HANDLE_PREFIX, _app_key, parse_app_handle, parse_handle
from croupier._ports import MasterPort
from croupier._reader import SMALL_BATCH, Reader, readers
from croupier._routing import Routing
from croupier._writer import Writer
from croupier.core.codec import to_json
from croupier.core.commands import (
    AppHeartbeat,
    GetLostMaps,
    GetShuffle,
    RegisterApp,
    RegisterShuffle,
    RerunMaps,
    Status,
    UnregisterApp,
    UnregisterShuffle,
)
from croupier.core.config import DEFAULT_HEARTBEAT_INTERVAL, ClientConfig, heartbeat_every, heartbeat_too_slow
from croupier.core.errors import (
    CroupierError,
    Unauthorized,
    Unavailable,
    UnknownApp,
)
from croupier.core.replies import (
    AppHeartbeatReply,
    ChangedReply,
    LostMapsReply,
    RegisterAppReply,
    RerunReply,
    ShuffleSummary,
)
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.auth import Signer
from croupier.transports.curve import curve_client_from_env
from croupier.transports.master_client import MasterClient
from croupier.transports.objstore import ObjectStore, open_object_store
from croupier.transports.rpc import Reply

__all__ = [
    "APP_HANDLE_PREFIX",
    "HANDLE_PREFIX",
    "App",
    "Client",
    "Shuffle",
    "connect",
    "parse_app_handle",
    "parse_handle",
]

log = logging.getLogger(__name__)

# the app keys every client of this process has learned from REGISTER_APP
_PROCESS_KEYS = Signer()


def connect(
    url: str,
    *,
    config: ClientConfig | None = None,
    tenant_token: str | None = None,
    curve_server_key: str | None = None,
) -> Client:
    """A client of the master at ``url`` (``tcp://host:port[,tcp://host:port...]``).

    ``tenant_token`` (default: the environment variable ``CROUPIER_TENANT_TOKEN``) is sent
    with every ``register_app``; a master with a tenants file needs it.
    ``curve_server_key`` (or ``config.curve_server_key``, or ``$CROUPIER_CURVE_SERVER_KEY``)
    is the CURVE public key of a cluster run with ``--curve`` (``croupier secret-public FILE``).

    Raises:
        ValueError: a malformed URL.
        BadRequest: a malformed CURVE key.
    """
    return Client(url, config=config, tenant_token=tenant_token, curve_server_key=curve_server_key)


class Client:
    """A connection to a Croupier cluster. Thread-safe; close it (or use ``with``).

    Parameters:
        url: the master URL.
        config: timeouts, buffer sizes and windows (``croupier.core.config.ClientConfig``).
        tenant_token: the tenant's token for ``register_app`` (default: ``CROUPIER_TENANT_TOKEN``).
        curve_server_key: the cluster's CURVE public key (Z85); it overrides the config's.
    """

    def __init__(
        self,
        url: str,
        *,
        config: ClientConfig | None = None,
        tenant_token: str | None = None,
        curve_server_key: str | None = None,
    ) -> None:
        self.url = url
        self._tenant_token = tenant_token or os.environ.get("CROUPIER_TENANT_TOKEN") or None
        # where readers find copies no worker serves (issue 26, sdk/_objects.py)
        self.object_store: str | None = os.environ.get("CROUPIER_OBJECT_STORE") or None
        self.config = config or ClientConfig()
        self._curve = curve_client_from_env(curve_server_key or self.config.curve_server_key)
        # signs each app's requests with the key REGISTER_APP returned (PROTOCOL §2.1); shared by
        # the clients of this process, so that another client here can open the app's shuffles
        self._signer = _PROCESS_KEYS
        self._master = MasterClient(
            url,
            timeout=self.config.rpc_timeout,
            attempts=self.config.rpc_retries + 1,
            deadline=self.config.failover_deadline,
            curve=self._curve,
            signer=self._signer,
        )
        self._lock = threading.Lock()
        self._data: AsyncRpcClient | None = None
        self._apps: list[App] = []
        self._keys: dict[str, bytes] = {}  # app_id -> app key: the apps registered or opened here
        self._closed = False
        self._stores: dict[str, ObjectStore] = {}  # opened by readers, by URL; closed by close()
        self._suspects: dict[str, float] = {}  # worker_id -> monotonic time its exclusion ends

    # -- the contract -------------------------------------------------------------------------
    def register_app(self, name: str, *, app_id: str | None = None) -> App:
        """Register an application and start its heartbeats.

        ``name`` is 1..96 characters of ``[A-Za-z0-9._-]``. The id is chosen here
        (unless given), so a retried registration cannot create a second app.

        Raises:
            BadRequest: an invalid name or id.
            Unauthorized: the master has tenants and the tenant token is missing or wrong.
            QuotaExceeded: too many apps on the master.
            CroupierError: the master refused or could not be reached.
        """
        reply = self._register(name, app_id)
        app = App(self, reply.app_id, reply.name, _app_key(reply.app_key), master=self._master)
        with self._lock:
            if self._closed:
                app.close()
                raise Unavailable("the client is closed")
            self._apps.append(app)
        self._learn_key(app.app_id, app.app_key)
        app._start_heartbeats(reply.app_timeout)
        return app

    def _register(self, name: str, app_id: str | None) -> RegisterAppReply:
        """The master's REGISTER_APP reply, for ``app_id`` or an id chosen here.

        A chosen id refused as ``UNAUTHORIZED`` was registered by this very call, whose
        reply was lost (a repeat must be signed with a key it never got, PROTOCOL §2.1):
        a new id is chosen once, and the first app expires unused.
        """
        for last in (False, True):
            chosen = app_id or f"{name[:96]}-{secrets.token_hex(5)}"
            try:
                command = RegisterApp(name, chosen, tenant_token=self._tenant_token)
                return self._master.request(command, RegisterAppReply)
            except Unauthorized as exc:
                # only the refused repeat names the app: a tenant token refusal is raised as is
                if app_id is not None or last or exc.details.get("app_id") != chosen:
                    raise
                log.warning("app %s was registered but its key was lost; registering another id", chosen)
        raise AssertionError("unreachable")  # pragma: no cover

    @overload
    def open_shuffle(self, handle: str, /) -> Shuffle: ...

    @overload
    def open_shuffle(self, app_id: str, shuffle_id: int) -> Shuffle: ...

    def open_shuffle(self, app_id: str, shuffle_id: int | None = None) -> Shuffle:
        """A registered shuffle in another process: ``open_shuffle(handle)``, with the string
        ``Shuffle.handle()`` returned (see this module's docstring).

        ``open_shuffle(app_id, shuffle_id)`` (no key) still works on a cluster without a
        secret, and on any cluster for an app this client registered itself or opened a
        handle of (it knows their keys).

        Raises:
            BadRequest: ``handle`` is not a shuffle handle.
            Unauthorized: the two-id form on a cluster with a secret: pass a handle instead.
            UnknownApp, UnknownShuffle: no such app or shuffle.
        """
        if shuffle_id is None:
            app_id, shuffle_id, key = parse_handle(app_id)
            self._learn_key(app_id, key)
        else:
            with self._lock:
                # this client's keys, else one another client of this process learned (its
                # requests are signed with it, so its digests must be keyed with it too)
                key = self._keys.get(app_id) or self._signer.app_key(app_id)
        try:
            summary = self._master.request(GetShuffle(app_id, shuffle_id), ShuffleSummary)
        except Unauthorized as exc:
            if key is not None:
                raise
            raise Unauthorized(
                f"shuffle {app_id}/{shuffle_id}: this cluster has a secret, so a shuffle is opened"
                " with its handle (open_shuffle(shuffle.handle()), the string Shuffle.handle()"
                " returns in the process that registered it), not with its ids",
                exc.details,
            ) from exc
        return Shuffle(self, summary, app_key=key, master=self._master)

    def attach(self, handle: str) -> App:
        """Take over the app of ``handle`` (``App.handle()`` of another process, maybe dead).

        One heartbeat, signed with the handle's key, checks the handle; then this client
        heartbeats the app (as ``register_app`` does) and its requests are made as the app:
        register shuffles, ``app.open_shuffle(shuffle_id)``, write, read, ``unregister``.
        Finish a dead driver's maps with new attempts (``sh.writer(map_id, attempt_id=1)``):
        the first attempt to end wins, so a map that had ended keeps its output. An attached
        app's ``name`` is its id (the handle does not carry the name).

        Raises:
            BadRequest: ``handle`` is not an app handle.
            Unauthorized: the master refused the handle's key (another cluster's handle, a
                corrupted key, or no key on a cluster with a secret).
            UnknownApp: the app is gone: unregistered, or expired (no heartbeat within the
                master's ``--app-timeout``).
        """
        app_id, key = parse_app_handle(handle)
        timeout = self._check_handle(app_id, key)
        app = App(self, app_id, app_id, key, master=self._master)
        with self._lock:
            if self._closed:
                raise Unavailable("the client is closed")
            self._apps.append(app)
        self._learn_key(app_id, key)
        app._start_heartbeats(timeout)
        return app

    def _check_handle(self, app_id: str, key: bytes | None) -> float | None:
        """One heartbeat of ``app_id`` signed with ``key`` alone, before this process signs
        anything with it: a wrong key must not replace a right one other apps here use.
        Returns the master's app timeout (None: it did not say)."""
        signer = Signer()
        if key is not None:
            signer.add_app(app_id, key)
        cfg = self.config
        probe = MasterClient(
            self.url,
            timeout=cfg.rpc_timeout,
            attempts=cfg.rpc_retries + 1,
            deadline=cfg.failover_deadline,
            curve=self._curve,
            signer=signer,
        )
        try:
            return probe.request(AppHeartbeat(app_id), AppHeartbeatReply).app_timeout
        except Unauthorized as exc:
            raise Unauthorized(
                f"attach {app_id}: the master refused the handle's key (a handle of another cluster,"
                f" a corrupted one, or one without a key on a cluster with a secret): {exc}",
                exc.details,
            ) from exc
        except UnknownApp as exc:
            raise UnknownApp(
                f"attach {app_id}: no such app: it was unregistered, or it expired (no heartbeat"
                f" within the master's --app-timeout): {exc}",
                exc.details,
            ) from exc
        finally:
            probe.close()

    def _learn_key(self, app_id: str, key: bytes | None) -> None:
        """Remember ``app_id``'s key (from ``REGISTER_APP`` or a handle): this client's
        requests for that app are made as the app from now on."""
        if key is None:
            return
        with self._lock:
            self._keys[app_id] = key
        self._signer.add_app(app_id, key)

    def unregister_app(self, app_id: str) -> bool:
        """Unregister app ``app_id`` (its shuffles' files are deleted); True if it was live.

        On a cluster with a secret this client must know the app's key first (``attach``, or
        a handle given to ``croupier.dask.unregister``)."""
        return self._master.request(UnregisterApp(app_id), ChangedReply).changed

    def status(self) -> dict[str, Any]:
        """The master's status reply, as JSON values (PROTOCOL §4).

        A master with a cluster secret shows apps only its counts (``{"term", "leader",
        "seq", "counts", "master"}``, no ids); an open one (library use) the whole reply,
        workers, apps and shuffles. ``croupier admin`` sees the whole reply.

        Raises:
            CroupierError: the master could not be reached.
        """
        return dict(self._master.call(Status()))

    def close(self) -> None:
        """Stop heartbeats (apps are not unregistered) and the data-plane thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            apps, self._apps = self._apps, []
            data, self._data = self._data, None
        for app in apps:
            app.close()
        if data is not None:
            data.stop()
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()
        self._master.close()

    def _object_store(self) -> ObjectStore | None:
        """The store ``object_store`` names (None: none), opened once and shared by this
        client's readers (one connection pool), closed by ``close``."""
        url = self.object_store
        if not url:
            return None
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = self._stores[url] = open_object_store(url)
            return store

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r}{', closed' if self._closed else ''})"

    # -- shared by writers and readers ---------------------------------------------------------
    def _send(
        self,
        url: str,
        msg_type: int,
        body: dict[str, Any],
        payloads: Sequence[bytes | memoryview],
        callback: Callable[[Reply | None, CroupierError | None], None],
        *,
        timeout: float | None = None,
    ) -> None:
        """Queue one data-plane request; ``callback`` runs once, on the data-plane thread."""
        with self._lock:
            if self._closed:
                raise Unavailable("the client is closed")
            if self._data is None:
                self._data = AsyncRpcClient(
                    timeout=self.config.rpc_timeout,
                    name="croupier-data",
                    curve=self._curve,
                    signer=self._signer,
                )
                self._data.start()
            data = self._data
        data.send(url, msg_type, body, payloads, callback, timeout=timeout)

    def _suspect(self, worker_id: str) -> None:
        """A fetch from ``worker_id`` timed out: read its copies last for a while."""
        with self._lock:
            self._suspects[worker_id] = time.monotonic() + self.config.fetch_exclude_seconds

    def _suspected(self, worker_id: str) -> bool:
        with self._lock:
            until = self._suspects.get(worker_id)
            if until is not None and until <= time.monotonic():
                del self._suspects[worker_id]
                return False
            return until is not None

    def _forget(self, app: App) -> None:
        with self._lock:
            if app in self._apps:
                self._apps.remove(app)


class App:
    """A registered application; heartbeats keep it (and its shuffles) alive.

    Attributes:
        app_id, name: as registered.
        app_key: the app's key from ``REGISTER_APP`` (32 bytes; None on a cluster without a
            secret): every request of the app is signed with it (PROTOCOL §2.1) and batch
            digests are keyed with it. A credential: never print it.
        heartbeats: heartbeats the master acknowledged.
        heartbeat_interval: seconds between them: ``ClientConfig.app_heartbeat_interval``
            when set, else 10 s at most and at most a third of the app timeout the master
            told (at registration and in every heartbeat reply; PROTOCOL §4).
        master: the port to the master (passed in by the client that made the app).
    """

    def __init__(
        self, client: Client, app_id: str, name: str, app_key: bytes | None = None, *, master: MasterPort
    ) -> None:
        self.client = client
        self.master = master
        self.app_id = app_id
        self.name = name
        self.app_key = app_key
        self.heartbeats = 0
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL  # until _start_heartbeats
        self._timeout: float | None = None  # the master's app timeout, as last told
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register_shuffle(
        self, num_mappers: int, num_partitions: int, *, replicate: bool = True, shuffle_id: int | None = None
    ) -> Shuffle:
        """Register a shuffle; the master places every partition on a worker pair.

        Safe to retry: the call carries a request id, and the master answers a repeat with
        the shuffle it registered for it.

        Raises:
            BadRequest: sizes out of range.
            NotEnoughWorkers: too few workers to place the partitions.
            Conflict: ``shuffle_id`` exists with other sizes.
            QuotaExceeded: the app's tenant is over a quota; ``details`` names the ``tenant``,
                the ``quota``, its ``limit`` and the ``usage``.
        """
        # a fresh id for this call: the master client's retries resend it, so a retry after a
        # lost reply or a failover gets the shuffle the first try registered, not a second one
        request = RegisterShuffle(
            self.app_id, num_mappers, num_partitions, replicate, shuffle_id, request_id=secrets.token_hex(12)
        )
        summary = self.master.request(request, ShuffleSummary)
        return Shuffle(self.client, summary, app_key=self.app_key, master=self.master)

    def handle(self) -> str:
        """The string another process takes this app over with: ``client.attach(handle)``.

        It is ``croupier-app-v1:<app_id>:<app key>``, the key as 64 lowercase hex digits
        (empty on a cluster without a secret). Like a shuffle handle it is a credential:
        whoever holds it can heartbeat, write, read and unregister the app.
        """
        key = "" if self.app_key is None else self.app_key.hex()
        return f"{APP_HANDLE_PREFIX}:{self.app_id}:{key}"

    def open_shuffle(self, shuffle_id: int) -> Shuffle:
        """One of this app's shuffles, by id."""
        return self.client.open_shuffle(self.app_id, shuffle_id)

    def unregister(self) -> None:
        """Stop heartbeats and unregister; workers then delete the app's files. Idempotent."""
        self.close()
        self.master.request(UnregisterApp(self.app_id), ChangedReply)

    def close(self) -> None:
        """Stop heartbeats without unregistering (the master expires the app later)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        self.client._forget(self)

    def _start_heartbeats(self, timeout: float | None) -> None:
        """Heartbeat against the master's app ``timeout`` (None: it did not say; PROTOCOL §4)."""
        self._told(timeout, registering=True)
        if self.heartbeat_interval <= 0:
            return
        self._thread = threading.Thread(
            target=self._beat, name=f"croupier-heartbeat-{self.app_id}", daemon=True
        )
        self._thread.start()

    def _told(self, timeout: float | None, *, registering: bool = False) -> None:
        configured = self.client.config.app_heartbeat_interval
        if registering:
            self.heartbeat_interval = heartbeat_every(configured, timeout)
        if timeout is None or (timeout == self._timeout and not registering):
            return
        self._timeout = timeout
        self.heartbeat_interval = heartbeat_every(configured, timeout)
        if heartbeat_too_slow(configured, timeout):
            log.warning(
                "app %s: the heartbeat interval %gs (app_heartbeat_interval) is more than a third of"
                " the master's app timeout %gs: one late beat expires the app and deletes its data;"
                " set %gs or less, or leave it unset",
                self.app_id,
                configured,
                timeout,
                timeout / 3,
            )
        elif not registering:
            log.info(
                "app %s: the master's app timeout is now %gs: heartbeats every %gs",
                self.app_id,
                timeout,
                self.heartbeat_interval,
            )

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                reply = self.master.request(AppHeartbeat(self.app_id), AppHeartbeatReply)
                self._told(reply.app_timeout)
                self.heartbeats += 1
            except UnknownApp:
                log.error("app %s is no longer registered (expired?); heartbeats stop", self.app_id)
                return
            except CroupierError as exc:
                if self._stop.is_set():
                    return
                log.warning("heartbeat of app %s failed: %s", self.app_id, exc)

    def __repr__(self) -> str:
        return f"App({self.app_id!r})"


class Shuffle:
    """A registered shuffle: make writers and readers.

    Attributes:
        app_id, shuffle_id, num_mappers, num_partitions, replicate: as registered.
        app_key: its app's key (None on a cluster without a secret); writers key batch
            digests with it, readers check them with it.
        routing: the current location of every partition (shared by this object's writers).
        master: the port to the master (passed in by the client; its writers and readers use it).
    """

    def __init__(
        self, client: Client, summary: ShuffleSummary, *, app_key: bytes | None = None, master: MasterPort
    ) -> None:
        self.client = client
        self.master = master
        self.app_key = app_key
        self.app_id = summary.app_id
        self.shuffle_id = summary.shuffle_id
        self.num_mappers = summary.num_mappers
        self.num_partitions = summary.num_partitions
        self.replicate = summary.replicate
        self.routing = Routing.from_summary(summary)

    def handle(self) -> str:
        """The string another process opens this shuffle with: ``client.open_shuffle(handle)``.

        It is ``croupier-shuffle-v1:<app_id>:<shuffle_id>:<app key>``, the key as 64
        lowercase hex digits (empty on a cluster without a secret). It carries the app's key:
        whoever holds it can read and write this app's shuffles, so pass it as you would a
        password (task arguments, not logs).
        """
        key = "" if self.app_key is None else self.app_key.hex()
        return f"{HANDLE_PREFIX}:{self.app_id}:{self.shuffle_id}:{key}"

    def writer(self, map_id: int, attempt_id: int = 0) -> Writer:
        """A writer for one attempt of map ``map_id``; use it as a context manager."""
        return Writer(self, map_id, attempt_id)

    def wait_offloaded(self, timeout: float) -> None:
        """Return once every committed partition has its object copy (issue 26); RequestTimeout."""
        from croupier._objects import wait_offloaded

        wait_offloaded(self, timeout)

    def reader(self, partition: int, *, timeout: float | None = None) -> Reader:
        """An iterable over ``partition``'s records; it waits for the commit first."""
        return Reader(self, partition, timeout=timeout)

    def readers(
        self,
        partitions: Iterable[int],
        *,
        timeout: float | None = None,
        ahead: int = 2,
        small_batch: int = SMALL_BATCH,
    ) -> Iterator[Reader]:
        """A ``Reader`` for each of ``partitions``, in order: for a task that reads many.

        Usage::

            for reader in sh.readers(range(0, 640, 2)):
                for record in reader:
                    ...

        The locations of all of them come in one master call (per 10,000), and the
        ``ahead`` next readers start fetching while one is consumed, so that many small
        partitions cost little more than a few large ones. Each reader waits for the
        commit like ``reader`` and raises the same errors. The first copies of
        ``small_batch`` readers at a time are asked for in one ``FETCH_SMALL`` per worker
        (PROTOCOL §5.2): small partitions come whole in that reply (0: each reader alone).
        """
        return readers(self, partitions, timeout=timeout, ahead=ahead, small_batch=small_batch)

    def summary(self) -> dict[str, Any]:
        """The master's current summary (committed, lost partitions, sizes...), as JSON values.

        Raises:
            InternalError: the master's reply is malformed.
            CroupierError: the master could not be reached.
        """
        return dict(to_json(self._summary()))

    def _summary(self) -> ShuffleSummary:
        return self.master.request(GetShuffle(self.app_id, self.shuffle_id), ShuffleSummary)

    def lost_maps(self) -> dict[str, Any]:
        """The master's view of lost data (``GET_LOST_MAPS``), as JSON values: ``lost`` and
        ``suspect`` hold ``[partition, lo, hi]`` (maps ``lo..hi-1``), ``rerunning`` and ``rerun``
        hold ``[lo, hi]`` ranges; ``num_mappers``, ``committed``."""
        reply = self.master.request(GetLostMaps(self.app_id, self.shuffle_id), LostMapsReply)
        return dict(to_json(reply))

    def lost_map_ids(self) -> list[int]:
        """The ids of the maps whose data is lost or suspect (what ``rerun`` accepts)."""
        view = self.lost_maps()
        return sorted({m for _, lo, hi in (*view["lost"], *view["suspect"]) for m in range(lo, hi)})

    def rerun(self, maps: Iterable[int]) -> RerunReply:
        """Reopen the committed shuffle for new attempts of exactly ``maps`` (their data is lost).

        Write each of them again with ``writer(map_id, attempt_id)`` and a new attempt id (the
        lost attempt is refused); the shuffle commits again once all have ended, and readers
        then read the new attempts in place of the lost ones. A repeat while they are still
        rerunning is answered without change (``started`` False).

        Raises:
            Conflict: some maps' data is not lost (``details["maps"]`` names them), or the
                shuffle is not committed (yet, or again after another rerun).
        """
        ids = tuple(sorted(set(maps)))
        reply = self.master.request(RerunMaps(self.app_id, self.shuffle_id, ids), RerunReply)
        self.routing = Routing.from_summary(self._summary())  # the new epochs
        log.info(
            "shuffle %s/%d: rerunning maps %s (%d epochs)",
            self.app_id,
            self.shuffle_id,
            ids,
            len(reply.epochs),
        )
        return reply

    def unregister(self) -> bool:
        """Unregister the shuffle (workers delete its files). Returns whether it existed."""
        command = UnregisterShuffle(self.app_id, self.shuffle_id)
        return self.master.request(command, ChangedReply).changed

    def __repr__(self) -> str:
        return (
            f"Shuffle({self.app_id}/{self.shuffle_id}, mappers={self.num_mappers}, "
            f"partitions={self.num_partitions})"
        )
