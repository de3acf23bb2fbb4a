"""The data-plane scenarios of ``croupier bench``: the same bytes through the service and the ceiling.

- ``raw``: the SDK shuffle end to end (``croupier demo``'s verified shuffle: first push
  to last verified record), with replication on and off.
- ``ceiling`` and ``ceiling-tuned``: :mod:`croupier.tools.ceiling` (a bare
  push/replicate/flush/fetch pipeline) on the same bytes, plain and tuned (pre-faulted
  heap, O_DIRECT flushes: the physical reference); ``raw`` is reported as a ratio of each.
- ``scale``: the same bytes at 64, 256 and 640 partitions.
- ``actors``: 640 partitions with the workers' locations sharded over a few
  ``PartitionActor``s (the default) and with one actor per location (DESIGN §11).
- ``reads``: 640 partitions, reducers using ``Shuffle.readers`` (the default) and
  opening one ``Shuffle.reader`` per partition.
- ``curve``: the ``raw`` replicated shuffle with ZeroMQ CURVE off and on (``--curve``),
  interleaved, and the cost as ratios (seconds, and MB/s).

``--curve`` runs every other service scenario with CURVE on as well.

Every run also reports the workers' CPU seconds per GiB moved (user + system of the
worker processes, or of the ceiling's servers). Runs are interleaved run by run (every
other run in reverse order), in the caller's thread; each run starts and stops its own
processes.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from croupier.core.config import WorkerConfig

__all__ = ["DATA_SCENARIOS", "data_scenarios"]

DATA_SCENARIOS = ("raw", "ceiling", "ceiling-tuned", "scale", "actors", "reads", "curve")


@dataclass
class _Sample:
    """One run of one scenario; ``seconds`` and ``peak_rss`` only for the service's runs."""

    mb_per_s: float
    cpu_s_per_gib: float
    seconds: float | None = None
    peak_rss: int | None = None
    errors: list[str] = field(default_factory=list)
    note: str = ""
    read_cpu_s_per_gib: float | None = None  # the workers' CPU while the reducers read (service only)


_Plan = list[tuple[str, Callable[[], _Sample]]]


def _demo_run(
    size: int, mappers: int, partitions: int, workers: int, **options: Any
) -> Callable[[], _Sample]:
    def run() -> _Sample:
        from croupier.tools.demo import run_demo

        out = run_demo(size, mappers, partitions, workers, progress=False, **options)
        return _Sample(
            out.mb_per_s,
            out.worker_cpu_s_per_gib,
            out.seconds,
            out.worker_peak_rss,
            out.errors,
            read_cpu_s_per_gib=out.worker_read_cpu_s_per_gib,
        )

    return run


def _ceiling(size: int, tuned: bool) -> Callable[[], _Sample]:
    def run() -> _Sample:
        from croupier.tools.ceiling import CeilingOptions, run_once

        options = CeilingOptions(total=size, transport="tcp")
        out = run_once(options.tuned() if tuned else options)
        return _Sample(out["e2e_MBps"], out["worker_cpu_s_per_gib"], note=out["note"])

    return run


def _plan(
    scenarios: list[str],
    size: int,
    mappers: int,
    workers: int,
    partitions: int,
    push_buffer: int,
    curve: bool = False,
    secret_file: str | None = None,
) -> _Plan:
    """What one run does, in order: (result name, how to get one sample)."""
    plan: _Plan = []
    if "curve" in scenarios:
        # ZeroMQ CURVE's cost: the same shuffle without and with it, one after the other
        for name, on in (("off", False), ("on", True)):
            run = _demo_run(
                size, mappers, partitions, workers, push_buffer=push_buffer, curve=on, secret_file=secret_file
            )
            plan.append((f"curve/{name}", run))
    demo = functools.partial(_demo_run, curve=curve, secret_file=secret_file)
    if {"raw", "ceiling", "ceiling-tuned"} & set(scenarios):
        plan.append(("raw/replicated", demo(size, mappers, partitions, workers, push_buffer=push_buffer)))
    if "raw" in scenarios:
        plan.append(
            (
                "raw/unreplicated",
                demo(size, mappers, partitions, workers, replicate=False, push_buffer=push_buffer),
            )
        )
    if "scale" in scenarios:
        plan += [(f"scale/{parts}", demo(size, mappers, parts, workers)) for parts in (64, 256, 640)]
    if "actors" in scenarios:
        # DESIGN §11: a few actors owning shards of locations, against one actor per location
        for name, shards in (("sharded", WorkerConfig().partition_actors), ("per-location", 0)):
            config = WorkerConfig(heartbeat_interval=1.0, partition_actors=shards)
            plan.append((f"actors/{name}/640", demo(size, mappers, 640, workers, worker_config=config)))
    if "reads" in scenarios:
        # reducers of many partitions: Shuffle.readers against one Shuffle.reader per partition
        for name, batched in (("readers", True), ("reader-each", False)):
            plan.append((f"reads/{name}/640", demo(size, mappers, 640, workers, batched_reads=batched)))
    for name in ("ceiling", "ceiling-tuned"):
        if name in scenarios:
            plan.append((name, _ceiling(size, tuned=name == "ceiling-tuned")))
    return plan


def _stats(values: list[float], digits: int = 1) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def _summary(samples: list[_Sample]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "mb_per_s": _stats([s.mb_per_s for s in samples]),
        "worker_cpu_s_per_gib": _stats([s.cpu_s_per_gib for s in samples], 2),
        "runs": len(samples),
    }
    reads = [s.read_cpu_s_per_gib for s in samples if s.read_cpu_s_per_gib is not None]
    if reads:
        out["worker_read_cpu_s_per_gib"] = _stats(reads, 2)
    peaks = [s.peak_rss for s in samples if s.peak_rss is not None]
    if peaks:
        out["worker_peak_rss_mib"] = round(max(peaks) / 2**20)
    seconds = [s.seconds for s in samples if s.seconds is not None]
    if seconds:
        out["seconds"] = _stats(seconds)
    notes = sorted({s.note for s in samples if s.note})
    if notes:
        out["note"] = "; ".join(notes)
    return out


# (ratio name, numerator, denominator, what is compared): medians of the same invocation
_RATIOS = (
    ("raw_replicated_to_ceiling", "raw/replicated", "ceiling", "mb_per_s"),
    ("raw_replicated_to_ceiling_tuned", "raw/replicated", "ceiling-tuned", "mb_per_s"),
    ("replication_cost", "raw/replicated", "raw/unreplicated", "seconds"),
    ("scale_640_to_64", "scale/640", "scale/64", "seconds"),
    ("actors_sharded_to_per_location_640", "actors/sharded/640", "actors/per-location/640", "seconds"),
    ("reads_readers_to_reader_each_640", "reads/readers/640", "reads/reader-each/640", "seconds"),
    ("curve_cost", "curve/on", "curve/off", "seconds"),
    ("curve_throughput_ratio", "curve/on", "curve/off", "mb_per_s"),
    ("curve_worker_cpu_ratio", "curve/on", "curve/off", "cpu_s_per_gib"),
)


def _ratios(samples: dict[str, list[_Sample]]) -> dict[str, float]:
    def median(name: str, what: str) -> float:
        return float(statistics.median(getattr(s, what) for s in samples[name]))

    return {
        ratio: round(median(top, what) / median(bottom, what), 3)
        for ratio, top, bottom, what in _RATIOS
        if top in samples and bottom in samples
    }


def data_scenarios(
    scenarios: list[str],
    *,
    size: int,
    runs: int,
    mappers: int,
    workers: int,
    partitions: int = 64,
    push_buffer: int = 0,
    plot: str | None = None,
    curve: bool = False,
    secret_file: str | None = None,
) -> dict[str, Any]:
    """Run the named scenarios (of :data:`DATA_SCENARIOS`) ``runs`` times, interleaved.

    Parameters:
        partitions, push_buffer: the ``raw`` shuffle's partitions and client batch size
            (0 = the client's default).
        plot: a PNG file for the scale curve (needs matplotlib).
        curve: run the service's scenarios with ZeroMQ CURVE (keys from ``secret_file``,
            default a new secret per cluster); ``curve`` runs both either way.

    Returns one entry per result name (MB/s, workers' CPU-s per GiB, runs, and for the
    service's runs seconds and worker peak RSS), ``ratios``, ``failures`` if a shuffle
    did not verify, and ``plot`` when asked.
    """
    plan = _plan(scenarios, size, mappers, workers, partitions, push_buffer, curve, secret_file)
    samples: dict[str, list[_Sample]] = {}
    for run in range(runs):
        # every other run goes backwards, so that no scenario always runs first (a warm cache,
        # or a neighbour's load, then favours none of them)
        for name, sample in plan if run % 2 == 0 else plan[::-1]:
            samples.setdefault(name, []).append(sample())
    results: dict[str, Any] = {name: _summary(found) for name, found in samples.items()}
    results["ratios"] = _ratios(samples)
    failures = [f"{name}: {s.errors[:3]}" for name, found in samples.items() for s in found if s.errors]
    if failures:
        results["failures"] = failures
    if plot is not None:
        results["plot"] = _plot_scale(results, plot, size)
    return results


def _plot_scale(results: dict[str, Any], path: str, size: int) -> str:
    """Write the scale curve (MB/s by partitions, median with min-max) to ``path``; what was done."""
    points = sorted(
        (int(name.split("/")[1]), r["mb_per_s"])
        for name, r in results.items()
        if name.startswith("scale/") and isinstance(r, dict)
    )
    if not points:
        return "skipped: the scale scenario did not run"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib is not installed (pip install 'croupier[plot]')"
    xs = [p for p, _ in points]
    med = [m["median"] for _, m in points]
    err = [[m["median"] - m["min"] for _, m in points], [m["max"] - m["median"] for _, m in points]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(xs, med, yerr=err, marker="o", capsize=4)
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("partitions")
    ax.set_ylabel("MB/s, end to end (median, min-max)")
    ax.set_title(f"croupier bench scale: {size / 2**20:.0f} MiB, same bytes")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"wrote {path}"
