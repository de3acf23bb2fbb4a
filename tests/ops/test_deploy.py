"""``deploy/``: the alert rules and the Grafana dashboard name only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from croupier.ops.metrics import MasterMetrics, WorkerGauges, WorkerMetrics, exposition

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAME = re.compile(r"\bcroupier_[a-z_]+")
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def exposed() -> set[str]:
    worker = WorkerMetrics()
    worker.collect(
        WorkerGauges(
            memory=lambda: (0, 1, 0, 0, 0),
            locations=lambda: 0,
            flush=lambda: [(0, 0.0, 0)],
            dirs=[DEPLOY],
            connections=lambda: {"push": 0},
            throttled=lambda: {},
        )
    )
    master = MasterMetrics()
    master.collect(
        lambda: {"term": 1, "seq": 1, "master": {"role": "leader"}, "workers": [], "apps": [], "shuffles": []}
    )
    names: set[str] = set()
    for registry in (worker.registry, master.registry):
        for line in exposition(registry).decode().splitlines():
            if line.startswith("# TYPE "):
                name = line.split()[2]
                names |= {name, *(name + s for s in SUFFIXES)}
    return names


def referenced(text: str) -> set[str]:
    return set(NAME.findall(text))


def test_alert_rules_use_existing_metrics_and_cover_the_issues_list() -> None:
    yaml = pytest.importorskip("yaml")
    text = (DEPLOY / "prometheus-alerts.yml").read_text()
    rules = yaml.safe_load(text)["groups"][0]["rules"]
    alerts = {r["alert"] for r in rules}
    assert {
        "CroupierDiskAlmostFull",
        "CroupierWorkerCongested",
        "CroupierWorkerLost",
        "CroupierDataLost",
    } <= alerts
    assert "CroupierNoLeader" in alerts
    missing = referenced(text) - exposed()
    assert not missing, f"alert rules name metrics nobody exposes: {sorted(missing)}"


def test_dashboard_uses_existing_metrics() -> None:
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    assert len(dash["panels"]) >= 10
    missing = referenced(exprs) - exposed()
    assert not missing, f"the dashboard names metrics nobody exposes: {sorted(missing)}"
