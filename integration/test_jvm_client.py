"""The JVM client (``clients/jvm``) against real master and worker processes, security on.

Each test drives the Java test main ``io.croupier.test.JvmCli`` (a fresh JVM per command); the
Python SDK is the other side of the cross-language tests. Skipped when there is no JDK or no
pyspark (whose jars the client compiles against).
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from integration.procs import admin, fault_cluster
from tests.jvm.harness import build_test_classpath, run_java, spark_jars_or_skip

pytestmark = pytest.mark.integration

CLI = "io.croupier.test.JvmCli"
FAST = ClientConfig(rpc_timeout=5.0, fetch_timeout=3.0)


@pytest.fixture(scope="module")
def java_cp() -> str:
    return build_test_classpath(spark_jars_or_skip())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with fault_cluster(3, tmp_path / "cluster") as cl:
        yield cl


def java(cp: str, *args: str, check: bool = True) -> list[str]:
    return run_java(cp, CLI, *args, check=check).stdout.splitlines()


def read_records(lines: list[str]) -> list[tuple[int, int, bytes]]:
    out = []
    for line in lines:
        if line.startswith("record "):
            _, p, m, data = line.split(" ")
            out.append((int(p), int(m), base64.b64decode(data)))
    return out


def test_the_java_client_writes_and_reads_its_own_shuffle(java_cp: str, cluster: LocalCluster) -> None:
    out = java(java_cp, "e2e", cluster.master_url)
    assert out[-1].startswith("ok 150 records"), out


def test_java_writes_and_python_reads_every_record_once(java_cp: str, cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("jvm-to-py")
        sh = app.register_shuffle(num_mappers=3, num_partitions=5)
        for m in range(3):
            assert java(java_cp, "write", cluster.master_url, sh.handle(), str(m), "0", "400") == ["won=true"]
        got = sorted(r for p in range(5) for r in sh.reader(p))
        assert got == sorted(f"j-{m}-{i}".encode() for m in range(3) for i in range(400))
        app.unregister()


def test_python_writes_and_java_reads_every_record_once_and_a_map_range(
    java_cp: str, cluster: LocalCluster
) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("py-to-jvm")
        sh = app.register_shuffle(num_mappers=4, num_partitions=6)
        want: list[tuple[int, int, bytes]] = []
        for m in range(4):
            with sh.writer(m) as w:
                for i in range(300):
                    record = f"py-{m}-{i}".encode() * (1 + i % 7)
                    w.write(i % 6, record)
                    want.append((i % 6, m, record))
        everything = ("0", "2147483647", "0", "6")
        got = read_records(java(java_cp, "read", cluster.master_url, sh.handle(), *everything))
        assert sorted(got) == sorted(want)
        # the same through OPEN_STREAM and FETCH_CHUNK alone (no FETCH_SMALL)
        streamed = read_records(
            java(java_cp, "read", cluster.master_url, sh.handle(), *everything, "nosmall")
        )
        assert sorted(streamed) == sorted(want)
        # an AQE skew split: maps [1, 3) of partitions [2, 4)
        part = read_records(java(java_cp, "read", cluster.master_url, sh.handle(), "1", "3", "2", "4"))
        assert sorted(part) == sorted(x for x in want if 1 <= x[1] < 3 and 2 <= x[0] < 4)
        app.unregister()


def test_concurrent_java_tasks_share_mapper_end_requests_and_every_record_is_read_once(
    java_cp: str, cluster: LocalCluster
) -> None:
    """Eight map tasks of one JVM commit at once: their MAPPER_ENDs go in fewer requests
    (MAPPER_END_BATCH), every one wins, and Python reads every record once."""
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("jvm-ends")
        sh = app.register_shuffle(num_mappers=8, num_partitions=5)
        out = java(java_cp, "writers", cluster.master_url, sh.handle(), "8", "300")
        won, requests = (int(x.split("=")[1]) for x in out[-1].split())
        assert won == 8 and 1 <= requests <= 8, out
        summary = sh.summary()
        assert summary["mappers_ended"] == 8 and summary["committed"], summary
        got = sorted(r for p in range(5) for r in sh.reader(p))
        assert got == sorted(f"j-{m}-{i}".encode() for m in range(8) for i in range(300))
        app.unregister()


def test_java_ends_queued_behind_one_in_flight_go_to_the_master_as_one_batch(
    java_cp: str, cluster: LocalCluster
) -> None:
    """The first of 12 ends is held until the other 11 queued: those go as one
    MAPPER_END_BATCH that the real master decides entry by entry; all 12 maps ended."""
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("jvm-batch")
        sh = app.register_shuffle(num_mappers=12, num_partitions=4)
        out = run_java(java_cp, "io.croupier.client.EndChecks", cluster.master_url, sh.handle(), "12").stdout
        assert out.strip().splitlines()[-1] == "ok requests=2 batches=1 won=12", out
        summary = sh.summary()
        assert summary["mappers_ended"] == 12, summary
        app.unregister()


def test_the_jvm_ends_bench_counts_what_it_claims() -> None:
    """``integration/jvm_ends_bench``: every end wins in both modes; one per request takes
    one request per end, batched at most as many."""
    from integration.jvm_ends_bench import ends_bench

    batched, single = ends_bench(maps=120, threads=4, rounds=1)
    assert batched["mode"] == "batched" and single["mode"] == "single"
    assert batched["won"] == single["won"] == 120
    assert single["requests"] == 120 and 1 <= batched["requests"] <= 120
    assert batched["master_cpu_ms_per_1000"] > 0 and single["mapper_end_per_s"] > 0


MAPS, PARTITIONS = 6, 12


def test_java_names_the_lost_pairs_then_reruns_only_the_lost_maps(java_cp: str, tmp_path: Path) -> None:
    """Map m writes partitions 2m and 2m+1 only; both workers of one pair die after the commit:
    the Java reader reads everything else, then raises DATA_LOST naming exactly the pairs of the
    partitions that pair held; GET_LOST_MAPS + RERUN_MAPS from Java, new attempts, exact read."""
    with (
        fault_cluster(5, tmp_path / "cluster") as cluster,
        croupier.connect(cluster.master_url, config=FAST) as client,
    ):
        app = client.register_app("jvm-lost")
        sh = app.register_shuffle(num_mappers=MAPS, num_partitions=PARTITIONS)
        url, handle = cluster.master_url, sh.handle()
        for m in range(MAPS):
            assert java(java_cp, "write", url, handle, str(m), "0", "200", str(2 * m), str(2 * m + 1)) == [
                "won=true"
            ]
        ids = cluster.worker_ids()
        loc = sh.routing.current(0)
        pair = {loc.primary.worker_id, loc.replica.worker_id if loc.replica else ""}
        for wid in pair:
            cluster.kill_worker(ids.index(wid))
        lost_parts = set()
        for p in range(PARTITIONS):
            at = sh.routing.current(p)
            if {at.primary.worker_id, at.replica.worker_id if at.replica else ""} <= pair:
                lost_parts.add(p)
        want_pairs = sorted(f"{p // 2}:{p}" for p in lost_parts)
        out = java(java_cp, "read", url, handle, "0", str(MAPS), "0", str(PARTITIONS), check=False)
        assert any(line.startswith("error DATA_LOST") for line in out), out[-3:]
        assert sorted(out[-1].split()[1:]) == want_pairs
        # every partition not lost was read in full before the loss was raised
        read = read_records(out)
        assert {p for p, _, _ in read} == set(range(PARTITIONS)) - lost_parts
        lost_maps = sorted({p // 2 for p in lost_parts})
        for _ in range(100):  # the master learns the loss when it declares the workers lost
            if set(lost_maps) <= set(sh.lost_map_ids()):
                break
            threading.Event().wait(0.1)
        assert java(java_cp, "rerun", url, handle) == ["rerun " + " ".join(map(str, lost_maps))]
        for m in lost_maps:
            assert java(java_cp, "write", url, handle, str(m), "1", "200", str(2 * m), str(2 * m + 1)) == [
                "won=true"
            ]
        got = sorted(r for p in range(PARTITIONS) for r in sh.reader(p))
        assert got == sorted(f"j-{m}-{i}".encode() for m in range(MAPS) for i in range(200))
        app.unregister()


def test_a_curve_cluster_refuses_the_java_client_at_start_up(java_cp: str, tmp_path: Path) -> None:
    with LocalCluster(1, tmp_path / "cluster", processes=True, curve=True) as cluster:
        # the subprocess's own timeout (run_java's) is the guard against a hang
        out = java(java_cp, "ping", cluster.master_url, check=False)
        assert len(out) == 1 and out[0].startswith("error UNAVAILABLE"), out
        assert "--curve" in out[0] and "CURVE" in out[0]


def test_java_heartbeats_and_attach_with_the_apps_handle(java_cp: str, cluster: LocalCluster) -> None:
    assert java(java_cp, "beats", cluster.master_url) == ["ok beats"]


@pytest.mark.parametrize("fault", ["kill", "decommission"])
def test_a_java_writer_outlives_a_worker_killed_or_decommissioned_mid_write(
    java_cp: str, cluster: LocalCluster, fault: str
) -> None:
    """Revives (same batch ids) after a primary dies halfway (UNAVAILABLE, timeouts), or turns
    decommissioning (HARD_SPLIT): every record read exactly once."""
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("jvm-revive")
        sh = app.register_shuffle(num_mappers=1, num_partitions=6)
        victim = sh.routing.current(0).primary.worker_id
        writer = subprocess.Popen(
            [
                "java",
                "-XX:+UseSerialGC",
                "-cp",
                java_cp,
                CLI,
                "pause",
                cluster.master_url,
                sh.handle(),
                "0",
                "4000",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert writer.stdout is not None and writer.stdin is not None
            assert writer.stdout.readline().strip() == "half"
            if fault == "kill":
                cluster.kill_worker(cluster.worker_ids().index(victim))
            else:
                admin(cluster.master_url, "decommission", victim, secret_file=cluster.secret_file)
                time.sleep(2.0)  # the worker learns it at its next heartbeat (every 0.5 s)
            out, _ = writer.communicate("go\n", timeout=150)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.communicate()
        assert out.startswith("won=true"), out
        assert sh.summary()["revived_partitions"], "the writer never revived a partition"
        got = sorted(r for p in range(6) for r in sh.reader(p))
        assert got == sorted(f"j-0-{i}".encode() for i in range(4000))
        app.unregister()


def test_java_pushes_and_reads_many_chunks_exactly(java_cp: str, cluster: LocalCluster) -> None:
    """48 MiB in 256 KiB batches over 2 partitions: several 8 MiB chunks per copy, fetched with
    requests in flight, every batch checked. Prints the rates (no assertion on speed)."""
    out = run_java(java_cp, CLI, "bench", cluster.master_url, "48", "2", "256", jit=True).stdout.splitlines()
    print(out[0])
    assert out[-1] == "ok", out


def test_java_heartbeats_at_the_masters_pace(java_cp: str, tmp_path: Path) -> None:
    """A master with a 1.5 s app timeout: the app, heartbeating at a third of what the master
    says (PROTOCOL §4, Heartbeat intervals), outlives three timeouts without a call of its own."""
    with LocalCluster(
        2,
        tmp_path / "cluster",
        processes=True,
        master_config=MasterConfig(worker_timeout=3.0, takeover_grace=1.0, app_timeout=1.5),
        worker_config=WorkerConfig(heartbeat_interval=0.5),
    ) as cluster:
        out = java(java_cp, "pace", cluster.master_url)
        if out == ["interval=10000"]:
            pytest.skip("this master does not say its app_timeout in REGISTER_APP's reply yet")
        assert out[0] == "interval=500" and out[-1] == "ok", out
