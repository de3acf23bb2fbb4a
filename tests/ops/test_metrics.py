"""``croupier.ops.metrics``: what the wrappers count and time, the collectors' gauges, the
quantiles read back from the histograms, and the timed event log."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from croupier.core.errors import Congested, CroupierError, Unavailable
from croupier.core.wire import MsgType
from croupier.ha.eventlog import MemoryEventLog
from croupier.ha.timedlog import TimedLog
from croupier.ops.metrics import (
    MasterMetrics,
    WorkerGauges,
    WorkerMetrics,
    exposition,
    quantiles_of,
)
from croupier.transports.rpc import Request, Responder


class FakeResponder:
    def __init__(self) -> None:
        self.done = False
        self.replies: list[Any] = []

    def ok(self, body: dict[str, Any] | None = None, payloads: Any = ()) -> None:
        self.done = True
        self.replies.append(("ok", body, list(payloads)))

    def error(self, exc: CroupierError) -> None:
        self.done = True
        self.replies.append(("error", exc.code))


def request(msg_type: MsgType, body: dict[str, Any], payloads: list[bytes] = ()) -> Request:  # type: ignore[assignment]
    return Request(int(msg_type), 1, body, [memoryview(p) for p in payloads], b"peer")


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_push_bytes_batches_and_ack_latency_per_app() -> None:
    m = WorkerMetrics()
    handler = m.watch("push", lambda req, resp: resp.ok({}))
    frames = [b"h" * 128, b"a" * 1000, b"b" * 500]  # a header frame of 2 batches, then their data
    handler(request(MsgType.PUSH, {"app_id": "app-1"}, frames), cast(Responder, FakeResponder()))
    handler(request(MsgType.PUSH, {"app_id": "app-2"}, frames[:2]), cast(Responder, FakeResponder()))
    r = m.registry
    assert value(r, "croupier_worker_push_bytes_total", app="app-1") == 1628
    assert value(r, "croupier_worker_push_batches_total", app="app-1") == 2
    assert value(r, "croupier_worker_push_bytes_total", app="app-2") == 1128
    assert value(r, "croupier_worker_push_ack_seconds_count") == 2
    assert m.quantiles()["push_ack"]["count"] == 2


def test_replicate_and_fetch_are_counted_on_their_own_series() -> None:
    m = WorkerMetrics()
    m.watch("replicate", lambda req, resp: resp.ok({}))(
        request(MsgType.REPLICATE, {"app_id": "a"}, [b"h" * 64, b"x" * 10]), cast(Responder, FakeResponder())
    )
    m.watch("fetch", lambda req, resp: resp.ok({}, [b"y" * 300]))(
        request(MsgType.FETCH_CHUNK, {"app_id": "a"}), cast(Responder, FakeResponder())
    )
    r = m.registry
    assert value(r, "croupier_worker_replicate_bytes_total", app="a") == 74
    assert value(r, "croupier_worker_replicate_batches_total", app="a") == 1
    assert value(r, "croupier_worker_fetch_bytes_total", app="a") == 300
    assert value(r, "croupier_worker_fetch_chunks_total", app="a") == 1
    assert value(r, "croupier_worker_push_bytes_total", app="a") == 0
    assert m.bytes_by_port() == {"push": 0.0, "replicate": 74.0, "fetch": 300.0}


def test_errors_by_code_failed_copies_and_congestion_time() -> None:
    m = WorkerMetrics()
    errors: list[CroupierError] = [
        Congested("full"),
        Unavailable("replica gone", {"failed_worker": "w2"}),
    ]

    def handler(req: Request, resp: Responder) -> None:
        if errors:
            resp.error(errors.pop(0))
        else:
            resp.ok({})

    watched = m.watch("push", handler)
    push = request(MsgType.PUSH, {"app_id": "a"}, [b"h" * 64, b"x"])
    watched(push, cast(Responder, FakeResponder()))
    assert m.congested_now()
    watched(push, cast(Responder, FakeResponder()))  # an error other than CONGESTED ends it too
    assert not m.congested_now()
    assert m.congested_seconds() > 0
    watched(push, cast(Responder, FakeResponder()))
    r = m.registry
    assert value(r, "croupier_worker_errors_total", port="push", code="CONGESTED") == 1
    assert value(r, "croupier_worker_failed_copies_total") == 1
    assert value(r, "croupier_worker_push_bytes_total", app="a") == 65  # the OK one only


def test_a_raised_error_is_counted_and_still_raised() -> None:
    m = WorkerMetrics()

    def handler(req: Request, resp: Responder) -> None:
        raise Congested("full")

    with pytest.raises(Congested):
        m.watch("push", handler)(
            request(MsgType.PUSH, {"app_id": "a"}, [b""]), cast(Responder, FakeResponder())
        )
    assert value(m.registry, "croupier_worker_errors_total", port="push", code="CONGESTED") == 1


def test_destroying_an_app_drops_its_series() -> None:
    m = WorkerMetrics()
    m.watch("push", lambda req, resp: resp.ok({}))(
        request(MsgType.PUSH, {"app_id": "a"}, [b"h" * 64, b"x"]), cast(Responder, FakeResponder())
    )
    m.watch("control", lambda req, resp: resp.ok({}))(
        request(MsgType.DESTROY, {"app_id": "a"}), cast(Responder, FakeResponder())
    )
    assert b'app="a"' not in exposition(m.registry)


def test_worker_gauges_are_read_at_scrape_time(tmp_path: Path) -> None:
    m = WorkerMetrics()
    used = [100]
    m.collect(
        WorkerGauges(
            memory=lambda: (used[0], 1000, 500, 10, 3),
            locations=lambda: 7,
            flush=lambda: [(4096, 0.5, 2)],
            dirs=[tmp_path, tmp_path / "missing"],
            connections=lambda: {"push": 2},
            throttled=lambda: {"hog": 1e6},
        )
    )
    r = m.registry
    assert value(r, "croupier_worker_memory_used_bytes") == 100
    used[0] = 200
    assert value(r, "croupier_worker_memory_used_bytes") == 200
    assert value(r, "croupier_worker_memory_cap_bytes") == 1000
    assert value(r, "croupier_worker_memory_refusals_total") == 3
    assert value(r, "croupier_worker_active_locations") == 7
    assert value(r, "croupier_worker_flush_bytes_total", disk="0") == 4096
    assert value(r, "croupier_worker_dir_healthy", dir=str(tmp_path)) == 1
    assert value(r, "croupier_worker_dir_free_bytes", dir=str(tmp_path)) > 0
    assert value(r, "croupier_worker_dir_healthy", dir=str(tmp_path / "missing")) == 0
    assert value(r, "croupier_worker_connections", port="push") == 2
    assert value(r, "croupier_worker_throttled_apps") == 1


def test_two_workers_in_one_process_keep_their_own_registries() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    a.watch("push", lambda req, resp: resp.ok({}))(
        request(MsgType.PUSH, {"app_id": "x"}, [b"h" * 64, b"x"]), cast(Responder, FakeResponder())
    )
    assert value(a.registry, "croupier_worker_push_bytes_total", app="x") == 65
    assert value(b.registry, "croupier_worker_push_bytes_total", app="x") == 0


def test_quantiles_are_bucket_bounds() -> None:
    assert quantiles_of([]) == {"count": 0.0, "p50": 0.0, "p99": 0.0}
    buckets = [(0.001, 50.0), (0.005, 99.0), (0.01, 100.0), (float("inf"), 100.0)]
    assert quantiles_of(buckets) == {"count": 100.0, "p50": 0.001, "p99": 0.005}


def test_master_requests_by_command_and_code_and_cluster_gauges() -> None:
    m = MasterMetrics()
    status = {
        "term": 3,
        "seq": 42,
        "master": {"role": "leader"},
        "workers": [{"status": "active"}, {"status": "active"}, {"status": "lost"}],
        "apps": [{}],
        "shuffles": [
            {"committed": True, "lost_partitions": [1, 2]},
            {"committed": False, "lost_partitions": []},
        ],
    }
    m.collect(lambda: status)
    resp = m.watch(request(MsgType.GET_LOCATIONS, {}), cast(Responder, FakeResponder()))
    resp.ok({})
    m.watch(request(MsgType.REGISTER_SHUFFLE, {}), cast(Responder, FakeResponder())).error(Congested("no"))
    r = m.registry
    assert value(r, "croupier_master_requests_total", command="GET_LOCATIONS", code="OK") == 1
    assert value(r, "croupier_master_requests_total", command="REGISTER_SHUFFLE", code="CONGESTED") == 1
    assert value(r, "croupier_master_request_seconds_count", command="GET_LOCATIONS") == 1
    # cumulative buckets: the reply took well under 10 s, and no request of another command counts
    assert value(r, "croupier_master_request_seconds_bucket", command="GET_LOCATIONS", le="10.0") == 1
    assert value(r, "croupier_master_request_seconds_bucket", command="GET_LOCATIONS", le="+Inf") == 1
    assert value(r, "croupier_master_request_seconds_bucket", command="REGISTER_SHUFFLE", le="+Inf") == 1
    assert 0 < value(r, "croupier_master_request_seconds_sum", command="GET_LOCATIONS") < 10
    assert b'croupier_master_requests_total{code="OK",command="GET_LOCATIONS"} 1.0' in exposition(r)
    assert value(r, "croupier_master_role", role="leader") == 1
    assert value(r, "croupier_master_term") == 3
    assert value(r, "croupier_master_workers", state="active") == 2
    assert value(r, "croupier_master_workers", state="lost") == 1
    assert value(r, "croupier_master_shuffles") == 2
    assert value(r, "croupier_master_shuffles_committed") == 1
    assert value(r, "croupier_master_lost_partitions") == 2
    assert r.get_sample_value("croupier_master_offload_pending_copies") is None  # no object store


def test_a_master_with_an_object_store_reports_the_offload_s_progress_and_lag() -> None:
    m = MasterMetrics()
    offload = {"committed_copies": 8, "offloaded_copies": 5, "pending_copies": 3, "pending_bytes": 3000}
    status = {"term": 1, "seq": 1, "master": {"role": "leader"}, "workers": [], "apps": [], "shuffles": []}
    m.collect(lambda: {**status, "offload": {**offload, "oldest_pending_seconds": 12.5, "shuffles": []}})
    for name, want in (*offload.items(), ("oldest_pending_seconds", 12.5)):
        assert value(m.registry, f"croupier_master_offload_{name}") == want, name
    assert m.registry.get_sample_value("croupier_master_orphan_sweeps_total") is None  # no janitor stats
    janitor = {"deleted_objects": 7, "sweeps": 2, "swept_apps": 1, "swept_objects": 3, "failures": 0}
    m = MasterMetrics()
    m.collect(lambda: {**status, "object_janitor": janitor})
    assert value(m.registry, "croupier_master_objects_deleted_total") == 7
    assert value(m.registry, "croupier_master_orphan_sweeps_total") == 2
    assert value(m.registry, "croupier_master_orphan_objects_swept_total") == 3


def test_a_follower_reports_its_role_only() -> None:
    m = MasterMetrics()
    m.collect(lambda: None)
    assert value(m.registry, "croupier_master_role", role="unknown") == 1
    assert m.registry.get_sample_value("croupier_master_term") is None


def test_timed_log_counts_events_and_groups() -> None:
    m = MasterMetrics()
    log = TimedLog(MemoryEventLog(), m.appended)
    assert log.append([b"a", b"b", b"c"]) == 3
    assert log.append([b"d"]) == 4
    assert [rec for _, rec in log.read()] == [b"a", b"b", b"c", b"d"]
    assert log.last_seq() == 4
    r = m.registry
    assert value(r, "croupier_master_events_appended_total") == 4
    assert value(r, "croupier_master_log_appends_total") == 2
    assert value(r, "croupier_master_append_group_events_sum") == 4
    assert m.quantiles()["append"]["count"] == 2
    log.close()


def test_master_latency_buckets_count_each_reply_once_at_its_bound() -> None:
    from croupier.ops.metrics import _LatencyCollector, _RequestStats

    stats = _RequestStats({1: "A"})
    for seconds in (0.003, 0.0025, 20.0):
        stats.add(1, "OK", seconds)
    family = next(iter(_LatencyCollector(stats).collect()))
    got = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert (got["0.001"], got["0.0025"], got["0.005"], got["10.0"], got["+Inf"]) == (0, 1, 2, 2, 3)


class CountingResponder(FakeResponder):
    """Reads the byte counters at the moment the reply leaves: a client that scrapes as soon as
    it has its reply must see its bytes counted."""

    def __init__(self, registry: CollectorRegistry, name: str) -> None:
        super().__init__()
        self._seen = (registry, name)
        self.counted_at_reply = -1.0

    def ok(self, body: dict[str, Any] | None = None, payloads: Any = ()) -> None:
        self.counted_at_reply = value(self._seen[0], self._seen[1], app="a")
        super().ok(body, payloads)


@pytest.mark.parametrize(
    ("port", "msg_type", "reply", "name", "expected"),
    [
        ("push", MsgType.PUSH, [], "croupier_worker_push_bytes_total", 74),
        ("replicate", MsgType.REPLICATE, [], "croupier_worker_replicate_bytes_total", 74),
        ("fetch", MsgType.FETCH_CHUNK, [b"y" * 300], "croupier_worker_fetch_bytes_total", 300),
    ],
)
def test_the_bytes_are_counted_before_the_reply_leaves(
    port: str, msg_type: MsgType, reply: list[bytes], name: str, expected: int
) -> None:
    m = WorkerMetrics()
    resp = CountingResponder(m.registry, name)
    m.watch(port, lambda req, r: r.ok({}, reply))(
        request(msg_type, {"app_id": "a"}, [b"h" * 64, b"x" * 10]), cast(Responder, resp)
    )
    assert resp.counted_at_reply == expected
    assert value(m.registry, name, app="a") == expected  # and once only
