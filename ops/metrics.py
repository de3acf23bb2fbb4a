"""Prometheus metrics of one worker or one master, each in its own ``CollectorRegistry``.

Several services may run in one process (tests, ``croupier local``), so nothing goes to the
global registry. The hot paths pay for one ``perf_counter`` pair, a dict look-up per app and
a few ``Counter.inc``/``Histogram.observe`` calls per request (``prometheus_client`` takes
one short lock per value); the master, whose command rate is its ceiling, counts its
requests and their latency as plain ints under one lock instead (``_RequestStats``, read
at scrape time). Every gauge is read at scrape time by a collector.

How requests are seen: ``watch(port, handler)`` wraps a worker server's handler, and the
master front calls ``MasterMetrics.watch`` on each request; either way the responder is
wrapped by ``_Timed``, which observes the time from the request's arrival to its reply and
counts the reply's code. No dataplane code changes for that.

Metric names and their nearest Celeborn metric: docs/guides/monitoring.md; the generated
list of every metric: the site's metrics reference (``croupier.tools.docs_reference``).
"""

from __future__ import annotations

import bisect
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError
from croupier.core.wire import MsgType
from croupier.transports.rpc import Handler, Request, Responder

__all__ = ["LATENCY_BUCKETS", "MasterMetrics", "WorkerGauges", "WorkerMetrics", "exposition"]

# 100 us .. 10 s: push acks are expected in the low milliseconds (seed goal P99 <= 5 ms)
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

_FETCH_CHUNK = int(MsgType.FETCH_CHUNK)
_FETCH_SMALL = int(MsgType.FETCH_SMALL)  # many small copies in one reply: counted as one
_COMMIT_FILES = int(MsgType.COMMIT_FILES)
_DESTROY = int(MsgType.DESTROY)

OnReply = Callable[[Request, float, CroupierError | None, int], None]


class _Timed:
    """A responder that reports its reply (elapsed seconds, error, payload bytes) once."""

    __slots__ = ("_inner", "_on_reply", "_request", "_t0")

    def __init__(self, inner: Responder, request: Request, on_reply: OnReply) -> None:
        self._inner = inner
        self._request = request
        self._on_reply = on_reply
        self._t0 = time.perf_counter()

    @property
    def done(self) -> bool:
        return self._inner.done

    # counted before the reply leaves: a client that scrapes once it has its reply sees its bytes
    def ok(self, body: dict[str, Any] | None = None, payloads: Sequence[Any] = ()) -> None:
        if not self._inner.done:
            size = sum(map(len, payloads)) if payloads else 0
            self._on_reply(self._request, time.perf_counter() - self._t0, None, size)
        self._inner.ok(body, payloads)

    def error(self, exc: CroupierError) -> None:
        if not self._inner.done:
            self._on_reply(self._request, time.perf_counter() - self._t0, exc, 0)
        self._inner.error(exc)


def _wrap(handler: Handler, on_reply: OnReply) -> Handler:
    def watched(request: Request, responder: Responder) -> None:
        timed = _Timed(responder, request, on_reply)
        try:
            handler(request, cast(Responder, timed))
        except CroupierError as exc:  # the server answers it: count it here
            on_reply(request, time.perf_counter() - timed._t0, exc, 0)
            raise

    return watched


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format."""
    return generate_latest(registry)


def _histogram(name: str, doc: str, registry: CollectorRegistry, labels: Sequence[str] = ()) -> Histogram:
    return Histogram(name, doc, labels, registry=registry, buckets=LATENCY_BUCKETS)


@dataclass
class WorkerGauges:
    """What a worker's collector reads at scrape time (callables: read when scraped)."""

    memory: Callable[[], tuple[int, int, int, int, int]]  # used, cap, peak, held, congested refusals
    locations: Callable[[], int]
    flush: Callable[[], list[tuple[int, float, int]]]  # per disk: bytes, busy seconds, writes
    dirs: Sequence[Path]
    connections: Callable[[], dict[str, int]]  # port name -> live connections
    throttled: Callable[[], dict[str, float]]  # throttled app -> its rate (bytes/s)
    load: Callable[[], dict[str, float]] = field(default=lambda: {})
    # the object-store offload (issue 26): uploaded, uploaded_bytes, failed, pending, lag_seconds
    offload: Callable[[], dict[str, float]] = field(default=lambda: {})


class _WorkerCollector(Collector):
    def __init__(self, gauges: WorkerGauges, metrics: WorkerMetrics) -> None:
        self._g = gauges
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._memory()
        yield GaugeMetricFamily(
            "croupier_worker_active_locations", "Live (uncommitted) locations", value=self._g.locations()
        )
        yield from self._flush()
        yield from self._disks()
        conns = GaugeMetricFamily("croupier_worker_connections", "Live client connections", labels=["port"])
        for port, n in sorted(self._g.connections().items()):
            conns.add_metric([port], n)
        yield conns
        throttled = GaugeMetricFamily(
            "croupier_worker_throttled_app_rate_bytes",
            "Push rate of each app throttled now (bytes/s)",
            labels=["app"],
        )
        rates = self._g.throttled()
        for app, rate in sorted(rates.items()):
            throttled.add_metric([app], rate)
        yield throttled
        yield GaugeMetricFamily("croupier_worker_throttled_apps", "Apps throttled now", value=len(rates))
        for name, value in sorted(self._g.offload().items()):
            yield GaugeMetricFamily(
                f"croupier_worker_offload_{name}",
                f"Object-store offload: {name.replace('_', ' ')}",
                value=value,
            )
        yield CounterMetricFamily(
            "croupier_worker_congested_seconds",
            "Seconds during which pushes were answered CONGESTED",
            value=self._m.congested_seconds(),
        )
        for name, value in sorted(self._g.load().items()):
            yield GaugeMetricFamily(f"croupier_worker_{name}", f"Load sample: {name} (0..1)", value=value)

    def _memory(self) -> Iterator[Metric]:
        used, cap, peak, held, refused = self._g.memory()
        yield GaugeMetricFamily(
            "croupier_worker_memory_used_bytes", "Buffered bytes and held state", value=used
        )
        yield GaugeMetricFamily("croupier_worker_memory_cap_bytes", "The memory cap (--memory)", value=cap)
        yield GaugeMetricFamily("croupier_worker_memory_peak_bytes", "Highest memory used so far", value=peak)
        yield GaugeMetricFamily(
            "croupier_worker_memory_held_bytes", "Bytes held by the state of locations", value=held
        )
        yield CounterMetricFamily(
            "croupier_worker_memory_refusals", "Admissions refused for lack of memory", value=refused
        )

    def _flush(self) -> Iterator[Metric]:
        nbytes = CounterMetricFamily("croupier_worker_flush_bytes", "Bytes flushed to disk", labels=["disk"])
        busy = CounterMetricFamily(
            "croupier_worker_flush_seconds", "Seconds spent writing flushes", labels=["disk"]
        )
        writes = CounterMetricFamily("croupier_worker_flushes", "Flush jobs written", labels=["disk"])
        for disk, (b, s, w) in enumerate(self._g.flush()):
            nbytes.add_metric([str(disk)], b)
            busy.add_metric([str(disk)], s)
            writes.add_metric([str(disk)], w)
        yield from (nbytes, busy, writes)

    def _disks(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "croupier_worker_dir_used_bytes", "Bytes used on the dir's disk", labels=["dir"]
        )
        free = GaugeMetricFamily(
            "croupier_worker_dir_free_bytes", "Bytes free on the dir's disk", labels=["dir"]
        )
        healthy = GaugeMetricFamily(
            "croupier_worker_dir_healthy", "1 when the dir can be read (statvfs)", labels=["dir"]
        )
        for d in self._g.dirs:
            try:
                usage = shutil.disk_usage(d)
            except OSError:
                healthy.add_metric([str(d)], 0)
                continue
            used.add_metric([str(d)], usage.used)
            free.add_metric([str(d)], usage.free)
            healthy.add_metric([str(d)], 1)
        yield from (used, free, healthy)


class WorkerMetrics:
    """One worker's metrics. ``watch`` its servers' handlers, ``collect`` its gauges."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        # per data port: (bytes counter, batches counter), each labelled by app
        app = ["app"]
        self._counters: dict[str, tuple[Counter, Counter]] = {
            "push": (
                Counter("croupier_worker_push_bytes", "PUSH bytes taken as primary", app, registry=r),
                Counter("croupier_worker_push_batches", "PUSH batches taken as primary", app, registry=r),
            ),
            "replicate": (
                Counter("croupier_worker_replicate_bytes", "REPLICATE bytes taken", app, registry=r),
                Counter("croupier_worker_replicate_batches", "REPLICATE batches taken", app, registry=r),
            ),
            "fetch": (
                Counter("croupier_worker_fetch_bytes", "Chunk bytes served", app, registry=r),
                Counter("croupier_worker_fetch_chunks", "Chunks served by FETCH_CHUNK", app, registry=r),
            ),
        }
        self._ack = _histogram(
            "croupier_worker_push_ack_seconds", "PUSH arrival to its ack (replica included)", r
        )
        self._replicate = _histogram(
            "croupier_worker_replicate_ack_seconds", "REPLICATE arrival to its ack", r
        )
        self._fetch = _histogram("croupier_worker_fetch_chunk_seconds", "FETCH_CHUNK arrival to its reply", r)
        self._commit = _histogram("croupier_worker_commit_seconds", "COMMIT_FILES arrival to its reply", r)
        self._errors = Counter(
            "croupier_worker_errors", "Error replies, by port and code", ["port", "code"], registry=r
        )
        self._failed_copies = Counter(
            "croupier_worker_failed_copies", "PUSHes whose replica copy failed (UNAVAILABLE)", registry=r
        )
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._lock = threading.Lock()  # only for the congestion clock and new label children
        self._congested_since: float | None = None
        self._congested_total = 0.0

    def collect(self, gauges: WorkerGauges) -> None:
        """Read ``gauges`` at each scrape."""
        self.registry.register(_WorkerCollector(gauges, self))

    def watch(self, port: str, handler: Handler) -> Handler:
        """``handler`` (of the server ``port``: push, replicate, fetch, control), counted and timed."""
        on_reply: OnReply = {
            "push": self._on_push,
            "replicate": self._on_replicate,
            "fetch": self._on_fetch,
        }.get(port, self._on_control)
        return _wrap(handler, on_reply)

    def forget_app(self, app_id: str) -> None:
        """Drop an app's labelled series (its data is gone)."""
        with self._lock:
            keys = [k for k in self._children if k[1] == app_id]
            for key in keys:
                del self._children[key]
                for counter in self._counters[key[0]]:
                    counter.remove(app_id)

    def congested_now(self) -> bool:
        """Was the last PUSH answered CONGESTED?"""
        return self._congested_since is not None

    def congested_seconds(self) -> float:
        with self._lock:
            since = self._congested_since
            return self._congested_total + (time.monotonic() - since if since is not None else 0.0)

    def _child(self, port: str, app: str) -> tuple[Any, Any]:
        key = (port, app)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                nbytes, batches = self._counters[port]
                child = self._children[key] = (nbytes.labels(app), batches.labels(app))
        return child

    def _on_push(self, req: Request, seconds: float, err: CroupierError | None, _size: int) -> None:
        self._ack.observe(seconds)
        if (err is not None and err.code == "CONGESTED") != (self._congested_since is not None):
            self._congestion(err)
        if err is not None:
            self._on_error("push", err)
            return
        app = req.body.get("app_id")
        if isinstance(app, str):
            nbytes, batches = self._children.get(("push", app)) or self._child("push", app)
            payloads = req.payloads
            nbytes.inc(sum(map(len, payloads)))
            batches.inc(len(payloads) - 1)

    def _on_replicate(self, req: Request, seconds: float, err: CroupierError | None, _size: int) -> None:
        self._replicate.observe(seconds)
        if err is not None:
            self._on_error("replicate", err)
            return
        app = req.body.get("app_id")
        if isinstance(app, str):
            nbytes, batches = self._children.get(("replicate", app)) or self._child("replicate", app)
            payloads = req.payloads
            nbytes.inc(sum(map(len, payloads)))
            batches.inc(len(payloads) - 1)

    def _on_fetch(self, req: Request, seconds: float, err: CroupierError | None, size: int) -> None:
        if req.msg_type not in (_FETCH_CHUNK, _FETCH_SMALL):
            if err is not None:
                self._on_error("fetch", err)
            return
        self._fetch.observe(seconds)
        if err is not None:
            self._on_error("fetch", err)
            return
        app = req.body.get("app_id")
        if isinstance(app, str):
            nbytes, chunks = self._children.get(("fetch", app)) or self._child("fetch", app)
            nbytes.inc(size)
            chunks.inc()

    def _on_control(self, req: Request, seconds: float, err: CroupierError | None, _size: int) -> None:
        if req.msg_type == _COMMIT_FILES:
            self._commit.observe(seconds)
        if err is not None:
            self._on_error("control", err)
            return
        app = req.body.get("app_id")
        if req.msg_type == _DESTROY and isinstance(app, str) and req.body.get("shuffle_id") is None:
            self.forget_app(app)

    def _on_error(self, port: str, err: CroupierError) -> None:
        self._errors.labels(port, err.code).inc()
        if port == "push" and err.code == "UNAVAILABLE" and "failed_worker" in (err.details or {}):
            self._failed_copies.inc()

    def _congestion(self, err: CroupierError | None) -> None:
        """Start or stop the congestion clock (called only when the state may change)."""
        congested = err is not None and err.code == "CONGESTED"
        with self._lock:
            now = time.monotonic()
            if congested and self._congested_since is None:
                self._congested_since = now
            elif not congested and self._congested_since is not None:
                self._congested_total += now - self._congested_since
                self._congested_since = None

    def bytes_by_port(self) -> dict[str, float]:
        """Bytes taken on push and replicate, and served on fetch, since start."""
        return {port: sum(counter_totals(c[0], "app").values()) for port, c in self._counters.items()}

    def quantiles(self) -> dict[str, dict[str, float]]:
        """P50/P99 (bucket upper bounds) and counts of each latency histogram, for pages and admin."""
        return {
            name: histogram_quantiles(h)
            for name, h in (
                ("push_ack", self._ack),
                ("replicate_ack", self._replicate),
                ("fetch_chunk", self._fetch),
                ("commit", self._commit),
            )
        }


def histogram_quantiles(h: Histogram) -> dict[str, float]:
    """``count``, ``p50`` and ``p99`` of an unlabelled histogram (upper bucket bounds, seconds)."""
    buckets: list[tuple[float, float]] = []
    for metric in h.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                buckets.append((float(s.labels["le"]), s.value))
    return quantiles_of(buckets)


def quantiles_of(buckets: Iterable[tuple[float, float]]) -> dict[str, float]:
    """From cumulative ``(le, count)`` pairs: the count and the P50/P99 bucket bounds."""
    ordered = sorted(buckets)
    total = ordered[-1][1] if ordered else 0.0
    out = {"count": total}
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        out[name] = next((le for le, c in ordered if total and c >= q * total), 0.0)
    return out


class MasterMetrics:
    """One master's metrics: requests by command and code, request latency, log appends,
    and the cluster's gauges read from ``state`` (a STATUS-shaped dict, or None) at scrape time."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        # requests and their latency: plain counts under one lock, read at scrape time
        self._stats = _RequestStats({int(t): t.name for t in MsgType})
        r.register(_RequestsCollector(self._stats))
        r.register(_LatencyCollector(self._stats))
        self._appends = Counter("croupier_master_events_appended", "Events appended to the log", registry=r)
        self._groups = Counter("croupier_master_log_appends", "Log appends (groups of events)", registry=r)
        self._append = _histogram("croupier_master_append_seconds", "One group's durable append", r)
        self._group = Histogram(
            "croupier_master_append_group_events", "Events per appended group", registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
        )  # fmt: skip

    def collect(self, state: Callable[[], dict[str, Any] | None]) -> None:
        self.registry.register(_MasterCollector(state))

    def watch(self, request: Request, responder: Responder) -> Responder:
        """The responder to use for ``request`` (the master front calls this)."""
        return cast(Responder, _Timed(responder, request, self._on_reply))

    def _on_reply(self, req: Request, seconds: float, err: CroupierError | None, _size: int) -> None:
        self._stats.add(req.msg_type, "OK" if err is None else err.code, seconds)

    def quantiles(self) -> dict[str, dict[str, float]]:
        """P50/P99 and count of the log appends (seconds)."""
        return {"append": histogram_quantiles(self._append)}

    def appended(self, events: int, seconds: float) -> None:
        self._appends.inc(events)
        self._groups.inc()
        self._append.observe(seconds)
        self._group.observe(events)


class _RequestStats:
    """The master's requests by (msg_type, code) and their latency by msg_type, as plain
    counts under one lock (~1 µs a request); the collectors below turn them into metric
    families at scrape time. prometheus_client's ``Counter.inc`` and ``Histogram.observe``
    take a lock per value and cost ~1.5 and ~4 µs a request (issue 27: per-command work)."""

    def __init__(self, names: dict[int, str]) -> None:
        self._names = names
        self._lock = threading.Lock()
        self._counts: dict[tuple[int, str], int] = {}
        # msg_type -> a count per LATENCY_BUCKETS bound (not cumulative), one for +Inf, the sum
        self._latency: dict[int, list[float]] = {}

    def add(self, msg_type: int, code: str, seconds: float) -> None:
        at = bisect.bisect_left(LATENCY_BUCKETS, seconds)  # the first bound >= seconds ("le")
        key = (msg_type, code)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            row = self._latency.get(msg_type)
            if row is None:
                row = self._latency[msg_type] = [0.0] * (len(LATENCY_BUCKETS) + 2)
            row[at] += 1
            row[-1] += seconds

    def name(self, msg_type: int) -> str:
        return self._names.get(msg_type, str(msg_type))

    def counts(self) -> list[tuple[int, str, int]]:
        with self._lock:
            return [(t, code, n) for (t, code), n in self._counts.items()]

    def latency(self) -> list[tuple[int, list[float]]]:
        with self._lock:
            return [(t, list(row)) for t, row in self._latency.items()]


class _RequestsCollector(Collector):
    """``croupier_master_requests_total{command,code}`` from ``_RequestStats``."""

    _name = "croupier_master_requests"  # read with _labelnames by the metrics reference
    _labelnames = ("command", "code")
    _doc = "Requests answered, by command and code (OK or the error code)"

    def __init__(self, stats: _RequestStats) -> None:
        self._stats = stats

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._doc, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._doc, labels=self._labelnames)
        for msg_type, code, n in sorted(self._stats.counts()):
            family.add_metric([self._stats.name(msg_type), code], n)
        yield family


class _LatencyCollector(Collector):
    """``croupier_master_request_seconds{command}`` (a histogram) from ``_RequestStats``."""

    _name = "croupier_master_request_seconds"
    _labelnames = ("command",)
    _doc = "Request arrival to its reply"

    def __init__(self, stats: _RequestStats) -> None:
        self._stats = stats

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)
        for msg_type, row in sorted(self._stats.latency()):
            buckets: list[tuple[str, float]] = []
            running = 0.0
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), row[:-1], strict=True):
                running += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric([self._stats.name(msg_type)], buckets, sum_value=row[-1])
        yield family


class _MasterCollector(Collector):
    def __init__(self, state: Callable[[], dict[str, Any] | None]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        status = self._state()
        master = (status or {}).get("master") or {}
        role = GaugeMetricFamily("croupier_master_role", "1 for this master's role", labels=["role"])
        role.add_metric([str(master.get("role", "unknown"))], 1)
        yield role
        if status is None:
            return
        yield GaugeMetricFamily("croupier_master_term", "The leader term", value=status.get("term", 0))
        if "workers" not in status:  # a follower: its role and term only
            return
        yield GaugeMetricFamily("croupier_master_log_seq", "Events folded so far", value=status.get("seq", 0))
        by_state = GaugeMetricFamily("croupier_master_workers", "Workers by state", labels=["state"])
        counts = {str(s): 0 for s in (WorkerStatus.ACTIVE, WorkerStatus.DECOMMISSIONING, WorkerStatus.LOST)}
        for w in status.get("workers", ()):
            counts[w["status"]] = counts.get(w["status"], 0) + 1
        for name, n in sorted(counts.items()):
            by_state.add_metric([name], n)
        yield by_state
        shuffles = status.get("shuffles", ())
        yield GaugeMetricFamily("croupier_master_apps", "Registered apps", value=len(status.get("apps", ())))
        yield GaugeMetricFamily("croupier_master_shuffles", "Registered shuffles", value=len(shuffles))
        yield GaugeMetricFamily(
            "croupier_master_shuffles_committed",
            "Registered shuffles that are committed",
            value=sum(1 for s in shuffles if s.get("committed")),
        )
        yield GaugeMetricFamily(
            "croupier_master_lost_partitions",
            "Lost partitions of the registered shuffles (DataLost on read)",
            value=sum(len(s.get("lost_partitions", ())) for s in shuffles),
        )
        yield from _offload(status.get("offload"))
        yield from _janitor(status.get("object_janitor"))


_OFFLOAD_GAUGES = (
    ("committed_copies", "Copies the commits of registered shuffles kept (with an object store)"),
    ("offloaded_copies", "Of those, the copies in the object store"),
    ("pending_copies", "Committed copies not in the object store yet"),
    ("pending_bytes", "Bytes of committed copies not in the object store yet (an estimate)"),
    ("oldest_pending_seconds", "Age of the oldest commit with copies not in the object store yet"),
)


_JANITOR_COUNTERS = (
    (
        "deleted_objects",
        "croupier_master_objects_deleted",
        "Objects the master deleted (unregister, expiry)",
    ),
    ("sweeps", "croupier_master_orphan_sweeps", "Orphan sweeps of the object store run"),
    (
        "sweeps_skipped",
        "croupier_master_orphan_sweeps_skipped",
        "Orphan sweeps skipped: another cluster's sweep claim on the prefix was live",
    ),
    (
        "swept_apps",
        "croupier_master_orphan_apps_swept",
        "Unknown apps the orphan sweep deleted",
    ),
    ("swept_objects", "croupier_master_orphan_objects_swept", "Objects the orphan sweep deleted"),
    ("failures", "croupier_master_object_cleanup_failures", "Object-store deletions or sweeps that failed"),
)


def _janitor(stats: dict[str, Any] | None) -> Iterator[Metric]:
    """The master's object-store cleanup (``croupier.actors.object_janitor``), since it leads."""
    if stats is None:
        return
    for key, name, text in _JANITOR_COUNTERS:
        yield CounterMetricFamily(name, text, value=stats.get(key, 0))


def _offload(offload: dict[str, Any] | None) -> Iterator[Metric]:
    """The offload's progress and lag, on a master run with ``--object-store`` (issue 26)."""
    if offload is None:
        return
    for name, text in _OFFLOAD_GAUGES:
        yield GaugeMetricFamily(f"croupier_master_offload_{name}", text, value=offload.get(name, 0))


def counter_totals(counter: Counter, by: str) -> dict[str, float]:
    """A labelled counter's ``_total`` samples summed by the label ``by``."""
    out: dict[str, float] = {}
    for metric in counter.collect():
        for s in metric.samples:
            if s.name.endswith("_total"):
                key = s.labels.get(by, "")
                out[key] = out.get(key, 0.0) + s.value
    return out
