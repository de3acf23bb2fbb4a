"""The HTTP endpoints of a real in-process cluster: /metrics byte counters against the
shuffle's bytes, /api/v1 (cluster, workers with their HTTP ports, apps, shuffles, one
shuffle's detail, history), the OpenAPI document, and a follower's answers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import croupier
from croupier.core.config import WorkerConfig
from croupier.ops.api import MasterApi
from croupier.ops.http import HttpEndpoint, master_routes, parse_http
from croupier.ops.metrics import MasterMetrics
from croupier.ops.openapi import PATHS
from croupier.services.local import LocalCluster


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read()
        return json.loads(body) if resp.headers.get_content_type() == "application/json" else body.decode()


def samples(text: str, name: str) -> dict[str, float]:
    """``name``'s samples by their ``app`` label (summed over other labels)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                key = s.labels.get("app", "")
                out[key] = out.get(key, 0.0) + s.value
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        workers=2, base_dir=tmp_path, http=True, worker_config=WorkerConfig(heartbeat_interval=0.2)
    ) as lc:
        yield lc


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_byte_counters_equal_the_shuffles_bytes_and_the_api_shows_it(cluster: LocalCluster) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    base = cluster.master.http.url
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("http")
        sh = app.register_shuffle(num_mappers=3, num_partitions=8)
        for m in range(3):
            with sh.writer(m) as w:
                for i in range(2000):
                    w.write(i % 8, b"r" * (i % 97))
        records = sum(len(list(sh.reader(p))) for p in range(8))
        assert records == 6000
        detail = get(f"{base}/api/v1/shuffles/{app.app_id}/{sh.shuffle_id}")
        push = replicate = fetch = 0.0
        for worker in cluster.workers:
            assert worker.http is not None
            text = get(worker.http.url + "/metrics")
            push += samples(text, "croupier_worker_push_bytes_total").get(app.app_id, 0.0)
            replicate += samples(text, "croupier_worker_replicate_bytes_total").get(app.app_id, 0.0)
            fetch += samples(text, "croupier_worker_fetch_bytes_total").get(app.app_id, 0.0)
        assert detail["state"] == "committed"
        assert detail["total_bytes"] > 0
        assert push == detail["total_bytes"]  # every byte pushed once as primary...
        assert replicate == detail["total_bytes"]  # ...and once more as replica (x2 in all)
        assert fetch == detail["total_bytes"]  # each partition read once, from one copy
        assert detail["num_partitions"] == 8 and len(detail["partitions"]) == 8
        assert detail["winners"] == {"0": 0, "1": 0, "2": 0}
        first = detail["partitions"][0]["epochs"][0]
        assert first["epoch"] == 0 and first["primary"] != first["replica"]
        shuffles = get(base + "/api/v1/shuffles")
        assert [(s["app_id"], s["committed"]) for s in shuffles] == [(app.app_id, True)]
        assert [a["app_id"] for a in get(base + "/api/v1/apps")] == [app.app_id]


def test_workers_report_their_http_port_to_the_master(cluster: LocalCluster) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    base = cluster.master.http.url
    ports = {w.worker_id: w.http.port for w in cluster.workers if w.http is not None}

    def reported() -> list[dict[str, Any]]:  # every worker's next heartbeat carries its port
        rows = [r for r in get(base + "/api/v1/workers") if r["http_port"] is not None]
        return rows if len(rows) == len(ports) else []

    rows = wait_for(reported, 10)
    assert {r["worker_id"]: r["http_port"] for r in rows} == ports
    assert cluster.status()["master"]["http"] == base  # STATUS names the master's HTTP endpoint
    cluster_info = get(base + "/api/v1/cluster")
    assert cluster_info["workers"] == 2 and cluster_info["role"] == "standalone"
    assert cluster_info["latency"]["append"]["count"] >= 1
    master_metrics = get(base + "/metrics")
    assert "croupier_master_workers" in master_metrics
    assert 'croupier_master_requests_total{code="OK",command="WORKER_HEARTBEAT"}' in master_metrics
    worker = get(cluster.workers[0].http.url + "/api/v1/worker")  # type: ignore[union-attr]
    assert worker["worker_id"] == cluster.workers[0].worker_id
    assert worker["memory"]["cap"] == cluster.workers[0].limiter.cap


def test_unknown_shuffle_is_404_and_a_bad_id_400(cluster: LocalCluster) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    base = cluster.master.http.url
    for path, code in (("/api/v1/shuffles/nope/0", 404), ("/api/v1/shuffles/nope/x", 400)):
        with pytest.raises(urllib.error.HTTPError) as info:
            get(base + path)
        assert info.value.code == code
        info.value.close()


def test_history_samples_throughput_and_events(cluster: LocalCluster) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    base = cluster.master.http.url
    with croupier.connect(cluster.master_url) as client:
        client.register_app("events")
        hist = wait_for(lambda: (h := get(base + "/api/v1/history"))["events"] and h, 15)
    assert any("app events" in e["text"] for e in hist["events"]) or hist["events"]
    assert set(hist) >= {"throughput", "events", "workers", "shuffles"}


def test_openapi_document_lists_every_path(cluster: LocalCluster) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    doc = get(cluster.master.http.url + "/api/v1/openapi.json")
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == set(PATHS)
    assert all(list(ops) == ["get"] for ops in doc["paths"].values())


def _follower(leader: str | None) -> HttpEndpoint:
    api = MasterApi(status=lambda: None, inspect=lambda fn: None, leader_http=lambda: leader)
    metrics = MasterMetrics()
    metrics.collect(api.status)
    return HttpEndpoint("127.0.0.1", 0, master_routes(metrics, api)).start()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_a_follower_redirects_to_the_leader_or_says_not_leader() -> None:
    endpoint = _follower("http://leader.example:8080")
    try:
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as info:
            opener.open(endpoint.url + "/api/v1/workers", timeout=5)
        assert info.value.code == 307
        assert info.value.headers["Location"] == "http://leader.example:8080/api/v1/workers"
        info.value.close()
        assert "croupier_master_role" in get(endpoint.url + "/metrics")
    finally:
        endpoint.stop()
    endpoint = _follower(None)
    try:
        with pytest.raises(urllib.error.HTTPError) as info:
            get(endpoint.url + "/api/v1/cluster")
        assert info.value.code == 503
        assert json.loads(info.value.read())["error"] == "NOT_LEADER"
        info.value.close()
    finally:
        endpoint.stop()


def test_parse_http_and_a_taken_port() -> None:
    assert parse_http("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert parse_http(":9100") == ("127.0.0.1", 9100)
    assert parse_http("10.0.0.1") == ("10.0.0.1", 0)
    with pytest.raises(ValueError):
        parse_http("host:http")
    first = _follower(None)
    try:
        with pytest.raises(OSError):
            HttpEndpoint(
                "127.0.0.1",
                first.port,
                master_routes(MasterMetrics(), MasterApi(lambda: None, lambda f: None)),
            ).start()
    finally:
        first.stop()


def test_admin_workers_shows_http_ports_and_admin_latency_reads_them(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from croupier.services.cli import main
    from croupier.transports.secret import SECRET_ENV, create_secret_file

    # admin always signs as a member; this in-process cluster is open and accepts that too
    create_secret_file(tmp_path / "secret")
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "secret"))

    ports = {w.worker_id: w.http.port for w in cluster.workers if w.http is not None}
    with croupier.connect(cluster.master_url) as client:
        sh = client.register_app("lat").register_shuffle(num_mappers=1, num_partitions=2)
        with sh.writer(0) as w:
            w.write(0, b"x" * 1000)
        assert list(sh.reader(0)) == [b"x" * 1000]

    def reported() -> bool:
        assert main(["admin", "--master", cluster.master_url, "workers", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        return {r["worker_id"]: r["http_port"] for r in rows} == ports

    assert wait_for(reported)
    assert main(["admin", "--master", cluster.master_url, "workers"]) == 0
    assert "HTTP_PORT" in capsys.readouterr().out
    assert main(["admin", "--master", cluster.master_url, "status"]) == 0
    assert f"http     {cluster.master.http.url}" in capsys.readouterr().out  # type: ignore[union-attr]
    assert main(["admin", "--master", cluster.master_url, "latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["worker_id"] for r in rows} == set(ports)
    assert all(r["error"] == "" for r in rows)
    assert sum(r["raw"]["push_ack"]["count"] for r in rows) >= 1
    assert sum(r["raw"]["commit"]["count"] for r in rows) == 2  # one COMMIT_FILES per worker
    assert main(["admin", "--master", cluster.master_url, "latency"]) == 0
    assert "PUSH_ACK" in capsys.readouterr().out
