"""``croupier bench`` end to end at a tiny size: every data scenario verifies its shuffle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from croupier.tools.bench import main_bench

pytestmark = pytest.mark.integration


def test_bench_data_scenarios_verify_and_report_their_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_bench(
        ["raw", "actors", "reads"],
        ha=False,
        runs=1,
        commands=0,
        clients=1,
        as_json=True,
        size=4 * 1024**2,
        mappers=2,
        workers=3,
        partitions=16,
        push_buffer=16 * 1024,
        plot="unused.png",
    )
    out = capsys.readouterr().out
    results = json.loads(out.strip().splitlines()[-1])
    assert code == 0, results.get("failures")
    assert "failures" not in results
    for name in (
        "raw/replicated",
        "raw/unreplicated",
        "actors/sharded/640",
        "actors/per-location/640",
        "reads/readers/640",
        "reads/reader-each/640",
    ):
        assert results[name]["runs"] == 1 and results[name]["mb_per_s"]["median"] > 0, name
        assert results[name]["worker_cpu_s_per_gib"]["median"] > 0, name  # real worker processes
    assert set(results["ratios"]) == {
        "replication_cost",
        "actors_sharded_to_per_location_640",
        "reads_readers_to_reader_each_640",
    }
    assert "actors/sharded/640" in out  # the table is printed too
    assert results["plot"] == "skipped: the scale scenario did not run"


def test_bench_ceilings_run_from_the_repository(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_bench(
        ["ceiling", "ceiling-tuned"],
        ha=False,
        runs=1,
        commands=0,
        clients=1,
        as_json=True,
        size=4 * 1024**2,
        mappers=2,
        partitions=16,
    )
    out = capsys.readouterr().out
    results = json.loads(out.strip().splitlines()[-1])
    assert code == 0, results.get("failures")
    # raw/replicated runs beside the ceilings, so that it can be reported as a ratio of each
    for name in ("raw/replicated", "ceiling", "ceiling-tuned"):
        assert results[name]["mb_per_s"]["median"] > 0, name
    assert results["raw/replicated"]["worker_cpu_s_per_gib"]["median"] > 0
    # the reads' share (from the pushes' end on): part of the whole, maybe under a clock tick
    reading = results["raw/replicated"]["worker_read_cpu_s_per_gib"]["median"]
    assert 0 <= reading <= results["raw/replicated"]["worker_cpu_s_per_gib"]["median"]
    # 4 MiB through a bare ceiling server can take less than one clock tick of CPU (10 ms)
    for name in ("ceiling", "ceiling-tuned"):
        assert results[name]["worker_cpu_s_per_gib"]["median"] >= 0, name
    assert set(results["ratios"]) == {"raw_replicated_to_ceiling", "raw_replicated_to_ceiling_tuned"}
    assert "ceiling-tuned" in out and "worker CPU-s/GiB" in out


def test_bench_scale_curve_is_plotted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "scale.png"
    code = main_bench(
        ["scale"],
        ha=False,
        runs=1,
        commands=0,
        clients=1,
        as_json=True,
        size=2 * 1024**2,
        mappers=2,
        plot=str(png),
    )
    results = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, results.get("failures")
    assert [k for k in results if k.startswith("scale/")] == ["scale/64", "scale/256", "scale/640"]
    assert "scale_640_to_64" in results["ratios"]
    assert results["plot"] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_unknown_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_bench(["raw", "nope"], ha=False, runs=1, commands=0, clients=1, as_json=False) == 2
    assert "nope" in capsys.readouterr().out


def test_bench_throttle_scenario_throttles_the_flooder_only() -> None:
    from croupier.tools.bench_throttle import throttle_scenario

    # tiny: one run of 2 s phases; a 64 GiB memory cap that a few seconds of flood cannot
    # fill, so every CONGESTED is the throttle's. The figures are not checked, the shape is
    found = throttle_scenario(runs=1, seconds=2.0, memories=(64 * 2**30,))
    assert set(found["ratios"]) == {"quiet_flood/64GiB_to_solo", "quiet_flood-throttled/64GiB_to_solo"}
    assert found["flood/64GiB"]["flood_congested"] == [0]  # throttling off
    assert found["flood-throttled/64GiB"]["flood_congested"][0] > 0  # the flooder was throttled
    assert found["flood-throttled/64GiB"]["quiet_congested"] == [0]  # the quiet app never was


def test_bench_curve_measures_both_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_bench(
        ["curve"],
        ha=False,
        runs=2,
        commands=0,
        clients=1,
        as_json=True,
        size=4 * 1024**2,
        mappers=2,
        workers=2,
        partitions=8,
    )
    out = capsys.readouterr().out
    results = json.loads(out.strip().splitlines()[-1])
    assert code == 0, results.get("failures")
    for name in ("curve/off", "curve/on"):
        assert results[name]["runs"] == 2 and results[name]["mb_per_s"]["median"] > 0, name
    assert set(results["ratios"]) == {"curve_cost", "curve_throughput_ratio", "curve_worker_cpu_ratio"}
    assert "curve_throughput_ratio" in out


def test_bench_small_reads_measures_every_mode_with_and_without_the_tier() -> None:
    from croupier.tools.bench_small import small_reads_scenario

    # tiny: 40 partitions of 2 KiB; every read is checked by the scenario, the figures are not
    found = small_reads_scenario(runs=1, partitions=40, size=2048)
    assert set(found["ms_per_partition"]) == {
        f"{tier}/{mode}"
        for tier in ("tier-off", "tier-on")
        for mode in ("reader", "readers-stream", "readers")
    }
    assert all(ms["median"] > 0 for ms in found["ms_per_partition"].values())
    assert len(found["ratios"]) == 2


def test_bench_metrics_scrapes_and_the_byte_counters_match(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_bench(
        ["metrics"],
        ha=False,
        runs=1,
        commands=0,
        clients=1,
        as_json=True,
        size=8 * 1024**2,
        mappers=2,
        workers=2,
        partitions=8,
    )
    out = capsys.readouterr().out
    found = json.loads(out.strip().splitlines()[-1])["metrics"]
    assert code == 0
    assert set(found["mb_per_s"]) == {"scraped", "quiet"} and found["scraped_over_quiet"] > 0
    (run,) = found["scraped_runs"]
    assert run["counters_match"], (run["shuffle_bytes"], run["counted"])
    assert run["shuffle_bytes"] > 8 * 1024**2
    assert run["push_ack"]["count"] >= 1 and run["push_ack"]["p99_ms"] > 0
    assert run["fetch_chunk"]["count"] >= 1  # FETCH_SMALL reads many small copies in one reply
    assert "push ack P50" in out
    half = found["half_peak"]  # the paced run: its shape only, no timing
    assert half["target_mb_per_s"] > 0 and half["push_mb_per_s"] > 0
    assert half["push_ack"]["count"] >= 1 and half["fetch_chunk"]["count"] >= 1
    assert "at half peak" in out
    floors = half["zmq_floor"]  # bare ZeroMQ round trips in the same run: under its load, and idle
    assert floors["idle"]["direct"]["count"] == floors["idle"]["relayed"]["count"] == 500
    assert floors["loaded"]["relayed"]["count"] >= 1
    for floor in floors.values():
        assert 0 < floor["direct"]["p50_ms"] <= floor["direct"]["p99_ms"]
    assert "floor (loaded)" in out and "floor (idle)" in out


def test_phase_cpu_measures_pushes_and_verified_reads_apart() -> None:
    from croupier.tools.phase_cpu import phase_cpu

    found = phase_cpu(64 * 1024**2, partitions=8, mappers=2, workers=2, reps=2)  # CPU ticks are 10 ms
    assert found["bytes"] >= 64 * 1024**2
    assert len(found["push_cpu_s_per_gib"]) == len(found["read_cpu_s_per_gib"]) == 2
    assert found["push_median"] > 0 and found["read_median"] >= 0
    # per kind of thread, by the OS names the workers gave their threads (ops/thread_names.py)
    assert found["push_threads"].get("worker-push", 0) > 0
    assert set(found["read_threads"]) & {"worker-fetch", "fetch-read", "ZMQbg/IO"}
    assert sum(found["push_threads"].values()) <= max(found["push_cpu_s_per_gib"]) * 2 * 1.5
