"""``croupier admin latency``: each worker's latency histograms, read over HTTP."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from croupier.core.replies import StatusReply

__all__ = ["latency_rows"]

KINDS = ("push_ack", "replicate_ack", "fetch_chunk", "commit")


def _ms(q: dict[str, float]) -> str:
    if not q.get("count"):
        return "-"
    return f"p50 {q['p50'] * 1e3:g} / p99 {q['p99'] * 1e3:g} ms (n={int(q['count'])})"


def latency_rows(status: StatusReply, timeout: float) -> list[dict[str, Any]]:
    """One row per live worker: its quantiles, formatted (``raw``: as the worker said them).

    A worker that reports no HTTP port, or does not answer, gets an ``error``.
    """
    http = (status.master.worker_http if status.master is not None else None) or {}
    rows: list[dict[str, Any]] = []
    for w in status.workers:
        if w.status == "lost":
            continue
        row: dict[str, Any] = {"worker_id": w.worker_id, "error": ""}
        port = http.get(w.worker_id)
        if port is None:
            row["error"] = "no HTTP endpoint reported"
            rows.append(row)
            continue
        try:
            with urllib.request.urlopen(f"http://{w.host}:{port}/api/v1/worker", timeout=timeout) as resp:
                latency = json.loads(resp.read())["latency"]
        except (OSError, ValueError, KeyError) as exc:
            row["error"] = f"no answer: {exc}"
            rows.append(row)
            continue
        row.update({k: _ms(latency.get(k, {})) for k in KINDS})
        row["raw"] = latency
        rows.append(row)
    return rows
