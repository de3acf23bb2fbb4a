"""The metrics against a real shuffle: ``python -m croupier.tools.bench_scrape [SIZE] [RUNS]``.

Runs ``croupier demo``'s verified shuffle (replicated, worker processes with their HTTP
endpoints on free ports) ``RUNS`` times in each of two modes, interleaved: ``scraped``
(every worker's ``/metrics`` fetched every second during the pushes and reads) and
``quiet`` (not scraped). Reports each mode's median MB/s and their ratio, and for the
scraped runs the workers' byte counters before and after the shuffle against its bytes
(the shuffle's ``total_bytes`` once committed: pushed once as primary and once as replica,
fetched once) and the push ack / fetch chunk P50 and P99 over all workers (bucket bounds).
Then one ``half_peak`` run: the map tasks paced so that together they push at about half of
the quiet runs' median push rate (the peak), the workers scraped only before and after it,
with that run's push ack and fetch chunk P50/P99 and its achieved push rate (the reads that
follow the pushes are not paced), and the floor under those acks: bare ZeroMQ round trips of
128 KiB every 5 ms, direct and through a relay process (a replicated push is two round trips
in series; :mod:`croupier.tools.zmq_floor`), during that run (the same load) and after it
(idle). Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from croupier.core.config import parse_size
from croupier.ops.metrics import quantiles_of
from croupier.services.local import LocalCluster
from croupier.tools.zmq_floor import Probe, zmq_floor

__all__ = ["Scraper", "half_peak", "main", "scrape_scenario"]

_COUNTERS = (
    "croupier_worker_push_bytes_total",
    "croupier_worker_replicate_bytes_total",
    "croupier_worker_fetch_bytes_total",
)
_HISTOGRAMS = ("croupier_worker_push_ack_seconds", "croupier_worker_fetch_chunk_seconds")


def _worker_urls(cluster: LocalCluster, timeout: float = 15.0) -> list[str]:
    """Every worker's metrics URL. The master learns a worker's HTTP port from its heartbeats,
    so one may be missing for a moment (just started, or just re-registered); a worker left
    out would be left out of every count, so this waits for all of them.

    Raises:
        RuntimeError: some worker's port was still unknown after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        status = cluster.status()
        http = (status.get("master") or {}).get("worker_http") or {}
        missing = [w["worker_id"] for w in status["workers"] if w["worker_id"] not in http]
        if not missing:
            return [f"http://{w['host']}:{http[w['worker_id']]}" for w in status["workers"]]
        if time.monotonic() > deadline:
            raise RuntimeError(f"the master knows no HTTP port of workers {missing}")
        time.sleep(0.1)


def _scrape(urls: list[str]) -> dict[str, Any]:
    """Counters summed over the workers (all apps) and histogram buckets merged."""
    totals = dict.fromkeys(_COUNTERS, 0.0)
    buckets: dict[str, dict[float, float]] = {h: {} for h in _HISTOGRAMS}
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in totals:
                    totals[s.name] += s.value
                base = s.name.removesuffix("_bucket")
                if s.name.endswith("_bucket") and base in buckets:
                    le = float(s.labels["le"])
                    buckets[base][le] = buckets[base].get(le, 0.0) + s.value
    return {"counters": totals, "buckets": buckets}


class Scraper:
    """Scrapes every worker each ``every`` seconds while entered; keeps the first and last scrape."""

    def __init__(self, cluster: LocalCluster, every: float = 1.0) -> None:
        """``every``: seconds between scrapes while running (``math.inf``: only before and after)."""
        self.urls = _worker_urls(cluster)
        self.every = every
        self.before: dict[str, Any] = {}
        self.after: dict[str, Any] = {}
        self.scrapes = 0
        self.shuffle_bytes = 0
        self._cluster = cluster
        self._stop = threading.Event()

    def _loop(self) -> None:
        while not self._stop.wait(min(self.every, 3600.0)):
            _scrape(self.urls)
            self.scrapes += 1

    @contextlib.contextmanager
    def running(self) -> Iterator[Scraper]:
        self.before = _scrape(self.urls)
        thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
        self.after = _scrape(self.urls)
        self.shuffle_bytes = sum(s["total_bytes"] for s in self._cluster.status()["shuffles"])


def _quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, float]:
    q = quantiles_of((le, after[le] - before.get(le, 0.0)) for le in after)
    return {"count": q["count"], "p50_ms": q["p50"] * 1e3, "p99_ms": q["p99"] * 1e3}


def scrape_scenario(
    size: int, runs: int, mappers: int = 8, partitions: int = 64, workers: int = 3
) -> dict[str, Any]:
    """Both modes, interleaved; see the module docstring."""
    from croupier.tools.demo import run_demo

    rates: dict[str, list[float]] = {"scraped": [], "quiet": []}
    push_rates: list[float] = []  # the quiet runs' push phase, MB/s
    checks: list[dict[str, Any]] = []
    for i in range(runs):
        for mode in ("scraped", "quiet") if i % 2 == 0 else ("quiet", "scraped"):
            scrapers: list[Scraper] = []

            def during(cluster: LocalCluster, scrapers: list[Scraper] = scrapers) -> Any:
                scrapers.append(Scraper(cluster))
                return scrapers[-1].running()

            out = run_demo(
                size,
                mappers,
                partitions,
                workers,
                progress=False,
                during=during if mode == "scraped" else None,
            )
            if not out.verified:
                raise RuntimeError(f"the shuffle failed: {out.errors}")
            rates[mode].append(out.mb_per_s)
            if mode == "quiet":
                push_rates.append(out.push_mb_per_s)
            if scrapers:
                checks.append(_check(scrapers[0]))
    medians = {mode: round(statistics.median(v), 1) for mode, v in rates.items()}
    return {
        "size": size,
        "runs": runs,
        "mb_per_s": rates,
        "median_mb_per_s": medians,
        "scraped_over_quiet": round(medians["scraped"] / medians["quiet"], 3),
        "scraped_runs": checks,
        "half_peak": half_peak(size, statistics.median(push_rates), mappers, partitions, workers),
    }


FLOOR_SIZE = 128 * 1024  # the floor's message: about a paced push (64 KiB batches, merged a little)
FLOOR_GAP = 0.005


def half_peak(size: int, peak: float, mappers: int, partitions: int, workers: int) -> dict[str, Any]:
    """One run with the writers paced to ``peak / 2`` MB/s in all; the histograms over that run,
    and the ZeroMQ floor during it (same load) and after it (idle)."""
    from croupier.tools.demo import run_demo

    scrapers: list[Scraper] = []
    loaded = Probe(FLOOR_SIZE, FLOOR_GAP)

    @contextlib.contextmanager
    def during(cluster: LocalCluster) -> Iterator[None]:
        scrapers.append(Scraper(cluster, every=math.inf))
        with scrapers[-1].running(), loaded:
            yield

    target = peak / 2
    out = run_demo(size, mappers, partitions, workers, progress=False, during=during, pace=target * 1e6)
    if not out.verified:
        raise RuntimeError(f"the paced shuffle failed: {out.errors}")
    check = _check(scrapers[0])
    pushes = max(1, int(check["push_ack"]["count"]))
    return {
        "zmq_floor": {"loaded": loaded.summary(), "idle": zmq_floor(FLOOR_SIZE, 500, FLOOR_GAP)},
        "mean_push_bytes": int(check["counted"]["push_bytes_total"] / pushes),
        "peak_push_mb_per_s": round(peak, 1),
        "target_mb_per_s": round(target, 1),
        "push_mb_per_s": round(out.push_mb_per_s, 1),
        "counters_match": check["counters_match"],
        "push_ack": check["push_ack"],
        "fetch_chunk": check["fetch_chunk"],
    }


def _check(s: Scraper) -> dict[str, Any]:
    delta = {
        name.removeprefix("croupier_worker_"): s.after["counters"][name] - s.before["counters"][name]
        for name in _COUNTERS
    }
    return {
        "shuffle_bytes": s.shuffle_bytes,
        "counted": delta,
        "counters_match": all(v == s.shuffle_bytes for v in delta.values()),
        "scrapes": s.scrapes,
        "push_ack": _quantiles(s.before["buckets"][_HISTOGRAMS[0]], s.after["buckets"][_HISTOGRAMS[0]]),
        "fetch_chunk": _quantiles(s.before["buckets"][_HISTOGRAMS[1]], s.after["buckets"][_HISTOGRAMS[1]]),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    size = parse_size(args[0]) if args else 256 * 2**20
    runs = int(args[1]) if len(args) > 1 else 2
    print(json.dumps(scrape_scenario(size, runs), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
