"""What the Prometheus metrics cost on the push path: ``python -m croupier.tools.bench_metrics``.

Times one PUSH through a trivial handler, bare and wrapped by ``WorkerMetrics.watch``
(the responder wrapper, the latency histogram, the per-app byte and batch counters),
with 1 and with 100 apps; then one scrape (``/metrics`` text) of a worker with 100 apps.
Prints one JSON line. The overhead is per request (a request carries many batches), so
it is compared with a push ack of the order of a millisecond (docs/guides/monitoring.md).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from croupier.core.wire import MsgType
from croupier.ops.metrics import WorkerMetrics, exposition
from croupier.transports.rpc import Handler, Request, Responder

__all__ = ["main", "measure"]


class _Null:
    done = False

    def ok(self, body: Any = None, payloads: Any = ()) -> None:
        pass

    def error(self, exc: Any) -> None:
        pass


def _per_call(handler: Handler, requests: list[Request], n: int) -> float:
    responder = cast(Responder, _Null())
    t0 = time.perf_counter()
    for i in range(n):
        handler(requests[i % len(requests)], responder)
    return (time.perf_counter() - t0) / n


def measure(n: int = 200_000) -> dict[str, float]:
    """Nanoseconds per PUSH bare and watched, and milliseconds per scrape."""
    frames = [memoryview(b"h" * 64 * 16)] + [memoryview(b"d" * 4096)] * 16  # 16 batches

    def requests(apps: int) -> list[Request]:
        return [Request(int(MsgType.PUSH), 1, {"app_id": f"app-{a}"}, frames, b"p") for a in range(apps)]

    def bare(_req: Request, resp: Responder) -> None:
        resp.ok({})

    out: dict[str, float] = {"bare_ns": _per_call(bare, requests(1), n) * 1e9}
    for apps in (1, 100):
        metrics = WorkerMetrics()
        out[f"watched_{apps}_apps_ns"] = _per_call(metrics.watch("push", bare), requests(apps), n) * 1e9
    t0 = time.perf_counter()
    scrapes = 50
    for _ in range(scrapes):
        exposition(metrics.registry)
    out["scrape_100_apps_ms"] = (time.perf_counter() - t0) / scrapes * 1e3
    out["overhead_ns"] = out["watched_1_apps_ns"] - out["bare_ns"]
    return {k: round(v, 1) for k, v in out.items()}


def main(argv: list[str] | None = None, out: Callable[[str], object] = print) -> int:
    args = sys.argv[1:] if argv is None else argv
    n = int(args[0]) if args else 200_000
    out(json.dumps(measure(n), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
