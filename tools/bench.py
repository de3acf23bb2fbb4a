"""``croupier bench``: benchmarks, measured side by side in one run (issue: bench).

Scenarios (each in its own module):

- data plane (:mod:`croupier.tools.bench_data`): ``raw``, ``ceiling``,
  ``ceiling-tuned``, ``scale``, ``actors``, ``reads``, ``curve`` (``raw`` with ZeroMQ CURVE
  off and on); MB/s and the workers' CPU-s per GiB, and ``raw`` as a ratio of both ceilings;
- ``dask`` (:mod:`croupier.tools.bench_dask`): a DataFrame shuffle through Croupier and
  through Dask P2P;
- ``control`` (:mod:`croupier.tools.bench_control`): MAPPER_END commands per second at
  the master, with the file log and (``--ha``) a ZooKeeper-replicated one.
- ``throttle`` (:mod:`croupier.tools.bench_throttle`): a quiet app's throughput while
  another app floods, as a ratio of its solo rate, with abnormal-app throttling off and on.
- ``small-reads`` (:mod:`croupier.tools.bench_small`): ms per partition reading 1,000
  partitions of 10 KiB with ``reader()``, ``readers()`` without and with ``FETCH_SMALL``,
  on a cluster with the memory tier off and one with it on.

Report figures as ratios of runs made in the same invocation: the machine is
shared and noisy. Everything runs in the caller's thread and stops what it starts.
"""

from __future__ import annotations

import json
from typing import Any

from croupier.tools.bench_data import DATA_SCENARIOS

__all__ = ["SCENARIOS", "main_bench"]

SCENARIOS = (*DATA_SCENARIOS, "dask", "control", "throttle", "small-reads", "metrics")


def _print_data(results: dict[str, Any]) -> None:
    """The data scenarios' table, then their ratios."""
    for key, r in results.items():
        if not (isinstance(r, dict) and "mb_per_s" in r):
            continue
        m, cpu = r["mb_per_s"], r["worker_cpu_s_per_gib"]["median"]
        extra = f", worker peak RSS {r['worker_peak_rss_mib']} MiB" if "worker_peak_rss_mib" in r else ""
        if "worker_read_cpu_s_per_gib" in r:
            extra += f", reading {r['worker_read_cpu_s_per_gib']['median']} CPU-s/GiB"
        print(
            f"{key:24s} MB/s median {m['median']:>8}  worker CPU-s/GiB {cpu:>6}"
            f"  (min {m['min']}, max {m['max']}, {r['runs']} runs{extra})"
        )
        if "note" in r:
            print(f"{'':24s} note: {r['note']}")
    for key, v in results.get("ratios", {}).items():
        print(f"{key:34s} {v}")
    if "plot" in results:
        print(f"plot: {results['plot']}")


def _dask(*, size: int, runs: int, workers: int) -> dict[str, Any]:
    from croupier.tools.bench_dask import dask_scenario

    found: dict[str, Any] = dask_scenario(size=size, runs=runs, workers=workers)["dask"]
    secs = found["seconds"]
    print(
        f"dask {found['bytes'] / 2**20:.0f} MiB {found['partitions']}->{found['partitions']}: croupier"
        f" {secs['croupier']['median']} s, p2p {secs['p2p']['median']} s, ratio"
        f" {found['ratio_croupier_to_p2p']} (verified {found['verified']})"
    )
    return found


def _throttle(*, runs: int) -> dict[str, Any]:
    from croupier.tools.bench_throttle import throttle_scenario

    found = throttle_scenario(runs=runs)
    for phase, r in found.items():
        if phase in ("ratios", "settings"):
            continue
        q = r["quiet_mb_per_s"]
        flood = (
            f"  flooder {r['flood_mb_per_s']:>6} MB/s, CONGESTED {r['flood_congested']}"
            if "flood_mb_per_s" in r
            else ""
        )
        print(
            f"throttle {phase:22s} quiet MB/s median {q['median']:>6} (min {q['min']}, max {q['max']},"
            f" CONGESTED {r['quiet_congested']}){flood}"
        )
    for key, v in found["ratios"].items():
        print(f"throttle {key:44s} {v}")
    return found


def _small_reads(*, runs: int) -> dict[str, Any]:
    from croupier.tools.bench_small import small_reads_scenario

    found = small_reads_scenario(runs=runs)
    for key, ms in found["ms_per_partition"].items():
        print(
            f"small-reads {key:28s} ms/partition median {ms['median']:>7}"
            f"  (min {ms['min']}, max {ms['max']}, {found['runs']} runs)"
        )
    for key, v in found["ratios"].items():
        print(f"small-reads {key:44s} {v}")
    return found


def _metrics(*, size: int, runs: int, mappers: int, workers: int, partitions: int) -> dict[str, Any]:
    from croupier.tools.bench_scrape import scrape_scenario

    found = scrape_scenario(size, runs, mappers=mappers, partitions=partitions, workers=workers)
    med = found["median_mb_per_s"]
    print(
        f"metrics  scraped every 1 s {med['scraped']:>7} MB/s, not scraped {med['quiet']:>7} MB/s"
        f" (ratio {found['scraped_over_quiet']})"
    )
    for run in found["scraped_runs"]:
        ack, fetch = run["push_ack"], run["fetch_chunk"]
        print(
            f"metrics  push ack P50 {ack['p50_ms']:g} ms P99 {ack['p99_ms']:g} ms (n={int(ack['count'])}),"
            f" fetch chunk P50 {fetch['p50_ms']:g} ms P99 {fetch['p99_ms']:g} ms;"
            f" byte counters = shuffle bytes: {run['counters_match']}"
        )
    half = found["half_peak"]
    ack, fetch = half["push_ack"], half["fetch_chunk"]
    print(
        f"metrics  at half peak: {half['push_mb_per_s']} MB/s pushed (target {half['target_mb_per_s']},"
        f" peak push {half['peak_push_mb_per_s']} MB/s): push ack P50 {ack['p50_ms']:g} ms"
        f" P99 {ack['p99_ms']:g} ms (n={int(ack['count'])}), fetch chunk P50 {fetch['p50_ms']:g} ms"
        f" P99 {fetch['p99_ms']:g} ms (reads unpaced)"
    )
    for when, floor in half["zmq_floor"].items():
        direct, relayed = floor["direct"], floor["relayed"]
        print(
            f"metrics  floor ({when}), bare ZeroMQ round trips of {floor['size']} B:"
            f" direct P50 {direct['p50_ms']:g} ms P99 {direct['p99_ms']:g} ms, relayed (as a"
            f" replicated push) P50 {relayed['p50_ms']:g} ms P99 {relayed['p99_ms']:g} ms"
            f" (n={relayed['count']})"
        )
    return found


def _other_scenarios(scenarios: list[str], runs: int, shape: dict[str, int]) -> dict[str, Any]:
    """The scenarios that start clusters of their own: throttle, small-reads, metrics."""
    results: dict[str, Any] = {}
    if "throttle" in scenarios:
        results["throttle"] = _throttle(runs=runs)
    if "small-reads" in scenarios:
        results["small_reads"] = _small_reads(runs=runs)
    if "metrics" in scenarios:
        results["metrics"] = _metrics(runs=runs, **shape)
    return results


def main_bench(
    scenarios: list[str],
    *,
    ha: bool,
    runs: int,
    commands: int,
    clients: int,
    as_json: bool,
    size: int = 256 * 1024**2,
    mappers: int = 8,
    workers: int = 3,
    partitions: int = 64,
    push_buffer: int = 0,
    plot: str | None = None,
    curve: bool = False,
    secret_file: str | None = None,
) -> int:
    """Run ``scenarios`` (of :data:`SCENARIOS`), print a table (and with ``as_json`` one JSON line).

    ``curve`` runs the service's data scenarios with ZeroMQ CURVE (the control scenario stays
    plaintext). Returns 0, 1 when a shuffle did not verify, or 2 for an unknown scenario."""
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        print(f"croupier bench: unknown or not yet built scenarios {unknown} (built: {sorted(SCENARIOS)})")
        return 2
    results: dict[str, Any] = {}
    data = [s for s in scenarios if s in DATA_SCENARIOS]
    if data:
        from croupier.tools.bench_data import data_scenarios

        results.update(
            data_scenarios(
                data,
                size=size,
                runs=runs,
                mappers=mappers,
                workers=workers,
                partitions=partitions,
                push_buffer=push_buffer,
                plot=plot,
                curve=curve,
                secret_file=secret_file,
            )
        )
        _print_data(results)
    if "dask" in scenarios:
        results["dask"] = _dask(size=size, runs=runs, workers=workers)
    if "control" in scenarios:
        from croupier.tools.bench_control import control_scenarios

        results.update(control_scenarios(ha=ha, runs=runs, commands=commands, clients=clients))
    shape = {"size": size, "mappers": mappers, "workers": workers, "partitions": partitions}
    results.update(_other_scenarios(scenarios, runs, shape))
    if as_json:
        print(json.dumps(results))
    return 1 if results.get("failures") else 0
