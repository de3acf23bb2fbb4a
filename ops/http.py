"""The HTTP endpoint of a master or a worker (``--http HOST:PORT``): aiohttp, on its own thread.

Routes (all read-only GETs):

    /metrics                        Prometheus text format (both)
    /api/v1/openapi.json            the OpenAPI 3 document of /api/v1 (both)
    /api/v1/worker                  a worker: memory, locations, bytes, latency quantiles, dirs
    /api/v1/cluster                 the master: role, term, seq, counts, latency quantiles
    /api/v1/workers, /apps, /shuffles   the master: STATUS's rows (``workers`` with ``http_port``)
    /api/v1/shuffles/{app}/{id}     the master: one shuffle's detail (``ops.api.shuffle_detail``)
    /api/v1/history                 the master: throughput samples and recent events
    /                               the master: the status page (``ops.page``)

A follower master answers /api/v1 with 307 to the leader's HTTP endpoint when it knows it,
else 503 ``{"error": "NOT_LEADER"}``. Everything here is served without credentials: bind it
to an address only operators reach, like an admin port (docs/guides/monitoring.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from aiohttp import ClientSession, ClientTimeout, web

from croupier.core.enums import WorkerStatus
from croupier.core.state import MasterState
from croupier.core.urls import parse_listen
from croupier.ops.api import History, MasterApi, Sample, shuffle_detail
from croupier.ops.metrics import MasterMetrics, exposition
from croupier.ops.openapi import openapi_document
from croupier.ops.page import PAGE_HTML

__all__ = ["HttpEndpoint", "master_routes", "parse_http", "start_master_http", "worker_routes"]

log = logging.getLogger(__name__)

Routes = Callable[[web.Application, "HttpEndpoint"], None]
JSON_HEADERS = {"Cache-Control": "no-store"}


class HttpEndpoint:
    """An aiohttp server on a thread of its own, bound at ``start`` (port 0 = any free port).

    Parameters:
        host, port: where to bind.
        routes: adds the routes (``master_routes`` or ``worker_routes``).
        name: the thread's name.
    """

    def __init__(self, host: str, port: int, routes: Routes, *, name: str = "http") -> None:
        self.host = host
        self.port = port
        self._routes = routes
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.background: list[Callable[[], Coroutine[Any, Any, None]]] = []  # run while serving
        self._tasks: list[asyncio.Task[None]] = []
        self.blocking = ThreadPoolExecutor(2, thread_name_prefix=f"{name}-call")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> HttpEndpoint:
        """Bind and serve; returns once the port is bound.

        Raises:
            OSError: the address cannot be bound.
        """
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self.blocking.shutdown(wait=True)
            raise self._error
        return self

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._cleanup())
        loop.close()

    async def _serve(self) -> None:
        app = web.Application()
        self._routes(app, self)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._tasks = [asyncio.create_task(job()) for job in self.background]

    async def _cleanup(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        # the client's name look-ups ran on the loop's default executor
        await asyncio.get_running_loop().shutdown_default_executor()

    def stop(self) -> None:
        """Stop serving and join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        self._thread = None
        self.blocking.shutdown(wait=True, cancel_futures=True)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run a blocking ``fn`` (an actor ask) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.blocking, fn)


class _Front(Protocol):
    def status(self) -> dict[str, Any] | None: ...

    def inspect(self, fn: Callable[[MasterState], Any]) -> Any: ...


def start_master_http(
    listen: str | None,
    metrics: MasterMetrics,
    front: _Front,
    leader_http: Callable[[], str | None] = lambda: None,
) -> HttpEndpoint | None:
    """The master's HTTP endpoint on ``listen`` (None: none), serving ``front``'s state."""
    if listen is None:
        return None
    host, port = parse_http(listen)
    api = MasterApi(
        status=front.status,
        inspect=front.inspect,
        leader_http=leader_http,
    )
    return HttpEndpoint(host, port, master_routes(metrics, api, History()), name="master-http").start()


def parse_http(text: str) -> tuple[str, int]:
    """``--http``'s ``HOST:PORT``, ``HOST`` or ``:PORT`` (port 0 or none = any free port).

    Raises:
        ValueError: not an address.
    """
    endpoint = parse_listen(text, default_port=0).removeprefix("tcp://")
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers=JSON_HEADERS)


def _metrics_route(app: web.Application, registry: Any) -> None:
    async def metrics(_request: web.Request) -> web.Response:
        body = exposition(registry)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def openapi(_request: web.Request) -> web.Response:
        return _json(openapi_document())

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/openapi.json", openapi)


def worker_routes(registry: Any, info: Callable[[], dict[str, Any]]) -> Routes:
    """A worker's routes: ``/metrics`` and ``/api/v1/worker`` (``info()``, called off the loop)."""

    def add(app: web.Application, endpoint: HttpEndpoint) -> None:
        _metrics_route(app, registry)

        async def worker(_request: web.Request) -> web.Response:
            return _json(await endpoint.call(info))

        app.router.add_get("/api/v1/worker", worker)

    return add


def master_routes(
    metrics: MasterMetrics, api: MasterApi, history: History | None = None, *, sample_every: float = 2.0
) -> Routes:
    """A master's routes; with ``history``, also samples the cluster every ``sample_every`` s."""

    def add(app: web.Application, endpoint: HttpEndpoint) -> None:
        _metrics_route(app, metrics.registry)
        handlers = _MasterHandlers(api, endpoint, metrics, history)
        for path, fn in (
            ("/api/v1/cluster", handlers.cluster),
            ("/api/v1/workers", handlers.workers),
            ("/api/v1/apps", handlers.apps),
            ("/api/v1/shuffles", handlers.shuffles),
            ("/api/v1/shuffles/{app_id}/{shuffle_id}", handlers.shuffle),
            ("/api/v1/history", handlers.history),
            ("/", handlers.page),
        ):
            app.router.add_get(path, fn)
        if history is not None:
            endpoint.background.append(lambda: handlers.sample_loop(sample_every))

    return add


class _MasterHandlers:
    def __init__(
        self, api: MasterApi, endpoint: HttpEndpoint, metrics: MasterMetrics, history: History | None
    ) -> None:
        self._api = api
        self._endpoint = endpoint
        self._metrics = metrics
        self._history = history

    async def _status(self, request: web.Request) -> dict[str, Any]:
        status = await self._endpoint.call(self._api.status)
        if status is None:
            leader = self._api.leader_http()
            if leader:
                raise web.HTTPTemporaryRedirect(leader.rstrip("/") + request.path_qs)
            raise web.HTTPServiceUnavailable(
                text='{"error": "NOT_LEADER", "message": "this master does not serve; ask the leader"}',
                content_type="application/json",
            )
        return dict(status)

    async def cluster(self, request: web.Request) -> web.Response:
        status = await self._status(request)
        master = status.get("master") or {}
        shuffles = status.get("shuffles", [])
        return _json(
            {
                "term": status["term"],
                "leader": status["leader"],
                "seq": status["seq"],
                "role": master.get("role"),
                "url": master.get("url"),
                "http": master.get("http"),
                "writable": master.get("writable"),
                "workers": len(status["workers"]),
                "apps": len(status["apps"]),
                "shuffles": len(shuffles),
                "shuffles_committed": sum(1 for s in shuffles if s.get("committed")),
                "tenants": status.get("tenants", []),
                "latency": self._metrics.quantiles(),
            }
        )

    async def workers(self, request: web.Request) -> web.Response:
        return _json(workers_rows(await self._status(request)))

    async def apps(self, request: web.Request) -> web.Response:
        return _json((await self._status(request))["apps"])

    async def shuffles(self, request: web.Request) -> web.Response:
        return _json((await self._status(request))["shuffles"])

    async def shuffle(self, request: web.Request) -> web.Response:
        await self._status(request)  # a follower redirects
        app_id = request.match_info["app_id"]
        try:
            sid = int(request.match_info["shuffle_id"])
        except ValueError:
            return _json({"error": "BAD_REQUEST", "message": "shuffle_id is an integer"}, 400)
        detail = await self._endpoint.call(lambda: self._api.inspect(shuffle_detail(app_id, sid)))
        if detail is None:
            return _json({"error": "UNKNOWN_SHUFFLE", "message": f"no shuffle {app_id}/{sid}"}, 404)
        return _json(detail)

    async def history(self, request: web.Request) -> web.Response:
        status = await self._status(request)
        h = self._history
        if h is None:
            return _json({"throughput": [], "events": [], "workers": {}})
        last = h.samples[-1] if h.samples else None
        return _json(
            {
                "throughput": h.throughput(),
                "events": list(h.events),
                "workers": last.workers if last is not None else {},
                "shuffles": status["shuffles"],
            }
        )

    async def page(self, _request: web.Request) -> web.Response:
        return web.Response(text=PAGE_HTML, content_type="text/html", headers=JSON_HEADERS)

    async def sample_loop(self, every: float) -> None:
        async with ClientSession(timeout=ClientTimeout(total=max(0.5, every))) as session:
            started = time.monotonic()
            while True:
                served = False
                try:
                    served = await self._sample(session)
                except Exception:  # the next sample tries again
                    log.debug("sampling the cluster failed", exc_info=True)
                # until the master serves (for 10 s at most: a follower never does), look again soon
                soon = not served and time.monotonic() - started < 10.0
                await asyncio.sleep(min(every, 0.1) if soon else every)

    async def _sample(self, session: ClientSession) -> bool:
        """One sample; False when the master does not serve (no STATUS)."""
        assert self._history is not None
        status = await self._endpoint.call(self._api.status)
        if status is None:
            return False
        workers: dict[str, dict[str, Any]] = {}
        push = fetch = 0.0
        for row in workers_rows(status):
            if row.get("http_port") is None or row["status"] == WorkerStatus.LOST:
                continue
            try:
                async with session.get(f"http://{row['host']}:{row['http_port']}/api/v1/worker") as resp:
                    info = await resp.json()
            except Exception as exc:  # a worker that does not answer is shown without its figures
                log.debug("worker %s did not answer: %s", row["worker_id"], exc)
                continue
            workers[row["worker_id"]] = info
            push += info.get("bytes", {}).get("push", 0.0)
            fetch += info.get("bytes", {}).get("fetch", 0.0)
        self._history.add(Sample(time.time(), push, fetch, workers), status)
        return True


def workers_rows(status: dict[str, Any]) -> list[dict[str, Any]]:
    """STATUS's workers, each with ``http_port`` (None: not reported) and ``heartbeat_age``."""
    master = status.get("master") or {}
    http = master.get("worker_http") or {}
    ages = master.get("worker_heartbeat_age") or {}
    loads = master.get("worker_load") or {}
    return [
        {
            **w,
            "http_port": http.get(w["worker_id"]),
            "heartbeat_age": ages.get(w["worker_id"]),
            "load": loads.get(w["worker_id"]),
        }
        for w in status.get("workers", [])
    ]
