"""``croupier demo``: a verified shuffle on an embedded cluster (file log, no ZooKeeper).

It starts a master and workers as subprocesses, runs ``mappers`` map tasks in
separate processes that push deterministic records, then reduce tasks (also
processes) that read every partition back and check every record against what was
written: the right partition, the right bytes, and every ``(map, seq)`` exactly
once. It prints throughput, and exits non-zero on any loss or duplicate.

Record layout (inside the SDK's record framing)::

    u32 map_id, u32 seq, u32 partition, u32 payload_len, u32 pool_offset, payload

The payload of ``(map, seq)`` is ``pool(map)[pool_offset:][:payload_len]``, a slice
of a per-map pseudo-random pool, so a reducer regenerates it and compares bytes.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import random
import struct
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from croupier.core.config import WorkerConfig
from croupier.tools.proc import cpu_seconds, peak_rss

if TYPE_CHECKING:
    from croupier.services.local import LocalCluster

__all__ = ["DemoResult", "run_demo"]

_RECORD = struct.Struct("<IIIII")
_POOL_BYTES = 1 << 20
_MIN_PAYLOAD = 256
_MAX_PAYLOAD = 32 * 1024


def _pool(map_id: int) -> bytes:
    return random.Random(map_id * 7_919 + 17).randbytes(_POOL_BYTES)


def _record_plan(map_id: int, budget: int) -> Iterator[tuple[int, int, int]]:
    """(seq, payload_len, pool_offset) for a map's records, until ``budget`` bytes."""
    rng = random.Random(map_id)
    seq = 0
    used = 0
    while used < budget:
        length = min(rng.randint(_MIN_PAYLOAD, _MAX_PAYLOAD), max(0, budget - used))
        offset = rng.randrange(_POOL_BYTES - _MAX_PAYLOAD)
        yield seq, length, offset
        used += length + _RECORD.size
        seq += 1


def partition_of(map_id: int, seq: int, partitions: int) -> int:
    return ((map_id * 2_654_435_761) ^ (seq * 40_503)) % partitions


def _warm() -> int:
    """Import the SDK as the tasks will use it: ``croupier``'s names load lazily, and an import
    inside the first task would count as shuffle time."""
    import croupier

    return sum(getattr(croupier, name) is not None for name in croupier.__all__)


def map_task(
    url: str,
    handle: str,
    map_id: int,
    budget: int,
    partitions: int,
    push_buffer: int = 0,
    curve_key: str = "",
    rate: float = 0.0,
) -> tuple[int, int]:
    """Push one map's records to the shuffle ``handle`` (``Shuffle.handle()``); returns (records, bytes).

    ``rate``: write at most that many bytes per second (sleeping when ahead); 0: as fast as it can."""
    import croupier
    from croupier.core.config import ClientConfig

    pool = _pool(map_id)
    records = 0
    nbytes = 0
    config = ClientConfig(push_buffer_size=push_buffer) if push_buffer else None
    with croupier.connect(url, config=config, curve_server_key=curve_key) as client:
        sh = client.open_shuffle(handle)
        with sh.writer(map_id, 0) as w:
            start = time.perf_counter()
            for seq, length, offset in _record_plan(map_id, budget):
                if rate and (ahead := nbytes / rate - (time.perf_counter() - start)) > 0.001:
                    time.sleep(ahead)
                p = partition_of(map_id, seq, partitions)
                w.write(p, _RECORD.pack(map_id, seq, p, length, offset) + pool[offset : offset + length])
                records += 1
                nbytes += _RECORD.size + length
    return records, nbytes


def reduce_task(
    url: str,
    handle: str,
    parts: list[int],
    mappers: int,
    partitions: int,
    batched: bool = True,
    curve_key: str = "",
) -> dict[str, Any]:
    """Read and check partitions (with ``Shuffle.readers``, or one ``reader`` each when not
    ``batched``); returns per-map counts and any errors."""
    import croupier

    pools: dict[int, bytes] = {}
    counts = [0] * mappers
    seq_sums = [0] * mappers
    errors: list[str] = []
    nbytes = 0
    with croupier.connect(url, curve_server_key=curve_key) as client:
        sh = client.open_shuffle(handle)
        for reader in sh.readers(parts) if batched else (sh.reader(p) for p in parts):
            p = reader.partition
            seen: set[tuple[int, int]] = set()
            for record in reader:
                m, seq, rp, length, offset = _RECORD.unpack_from(record)
                if rp != p or m >= mappers or len(record) != _RECORD.size + length:
                    errors.append(f"partition {p}: record of map {m} seq {seq} is malformed or misplaced")
                    continue
                if (m, seq) in seen:
                    errors.append(f"partition {p}: duplicate record map {m} seq {seq}")
                    continue
                seen.add((m, seq))
                if partition_of(m, seq, partitions) != p:
                    errors.append(f"partition {p}: map {m} seq {seq} belongs elsewhere")
                pool = pools.get(m)
                if pool is None:
                    pool = pools[m] = _pool(m)
                counts[m] += 1
                seq_sums[m] += seq
                nbytes += len(record)
                if record[_RECORD.size :] != pool[offset : offset + length]:
                    errors.append(f"partition {p}: map {m} seq {seq} has corrupted bytes")
    return {"counts": counts, "seq_sums": seq_sums, "errors": errors[:20], "bytes": nbytes}


@dataclass
class DemoResult:
    verified: bool
    bytes: int
    seconds: float
    mb_per_s: float
    records: int
    mappers: int
    partitions: int
    workers: int
    errors: list[str]
    replicate: bool = True
    worker_peak_rss: int = 0
    worker_cpu_seconds: float = 0.0
    push_seconds: float = 0.0  # first push to the last map task's end (the writers closed)
    worker_read_cpu_seconds: float = 0.0  # the workers' CPU from the pushes' end to the last read

    @property
    def push_mb_per_s(self) -> float:
        """The push phase alone (primary and replica acknowledged), MB/s."""
        return self.bytes / self.push_seconds / 1e6 if self.push_seconds else 0.0

    @property
    def worker_cpu_s_per_gib(self) -> float:
        """The workers' CPU (user + system, all of them) per GiB shuffled."""
        return self.worker_cpu_seconds / (self.bytes / 2**30) if self.bytes else 0.0

    @property
    def worker_read_cpu_s_per_gib(self) -> float:
        """The workers' CPU (user + system, all of them) per GiB while the reducers read."""
        return self.worker_read_cpu_seconds / (self.bytes / 2**30) if self.bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": self.verified,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 1),
            "push_seconds": round(self.push_seconds, 3),
            "push_mb_per_s": round(self.push_mb_per_s, 1),
            "records": self.records,
            "mappers": self.mappers,
            "partitions": self.partitions,
            "workers": self.workers,
            "replicate": self.replicate,
            "worker_peak_rss": self.worker_peak_rss,
            "worker_cpu_seconds": round(self.worker_cpu_seconds, 3),
            "worker_cpu_s_per_gib": round(self.worker_cpu_s_per_gib, 3),
            "worker_read_cpu_s_per_gib": round(self.worker_read_cpu_s_per_gib, 3),
            "errors": self.errors,
        }


class _Bar:
    """A rich progress bar on stderr (or nothing)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._progress: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(stderr=True),
        )
        self._progress.start()
        self._tasks = {
            "push": self._progress.add_task("push + replicate", total=total),
            "read": self._progress.add_task("fetch + verify  ", total=total),
        }

    def advance(self, task: str, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._tasks[task], nbytes)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@dataclass(frozen=True)
class _Job:
    """What every map and reduce task of one demo shuffle is told."""

    url: str
    handle: str = field(repr=False)  # Shuffle.handle(): it carries the app key
    mappers: int
    partitions: int
    procs: int
    curve_key: str = ""  # the cluster's CURVE public key, "" without CURVE
    pace: float = 0.0  # all the map tasks together write about this many bytes/s (0: unpaced)


def _warm_pool(pool: ProcessPoolExecutor, procs: int) -> None:
    """Start every pool process (and import croupier there): start-up is not shuffle time."""
    for warm in [pool.submit(_warm) for _ in range(procs)]:
        warm.result()


def _push(job: _Job, budget: int, push_buffer: int, bar: _Bar) -> tuple[float, float, int, int]:
    """Run the map tasks; (clock start, end of the pushes, bytes written, records)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(job.procs, mp_context=ctx) as pool:
        _warm_pool(pool, job.procs)
        started = time.perf_counter()
        rate = job.pace / job.procs  # job.procs map tasks run at once
        args = (job.url, job.handle)
        futures = [
            pool.submit(map_task, *args, m, budget, job.partitions, push_buffer, job.curve_key, rate)
            for m in range(job.mappers)
        ]
        written = 0
        records = 0
        for fut in as_completed(futures):
            r, b = fut.result()
            written += b
            records += r
            bar.advance("push", b)
        return started, time.perf_counter(), written, records


def _read(job: _Job, batched: bool, bar: _Bar) -> tuple[float, list[dict[str, Any]]]:
    """Run the reduce tasks; (when they started reading, each task's findings)."""
    ctx = multiprocessing.get_context("spawn")
    chunks = [list(range(i, job.partitions, job.procs)) for i in range(job.procs)]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(job.procs, mp_context=ctx) as pool:
        _warm_pool(pool, job.procs)
        reading = time.perf_counter()
        reads = [
            pool.submit(
                reduce_task, job.url, job.handle, parts, job.mappers, job.partitions, batched, job.curve_key
            )
            for parts in chunks
            if parts
        ]
        for done in as_completed(reads):
            res = done.result()
            results.append(res)
            bar.advance("read", res["bytes"])
    return reading, results


def _check(results: list[dict[str, Any]], expected: list[int], written: int) -> list[str]:
    """Every map's records read exactly once, and as many bytes read as written; the errors."""
    errors = [e for r in results for e in r["errors"]]
    for m, n in enumerate(expected):
        count = sum(r["counts"][m] for r in results)
        seq_sum = sum(r["seq_sums"][m] for r in results)
        if count != n or seq_sum != n * (n - 1) // 2:
            errors.append(f"map {m}: expected {n} records, read {count}")
    read_bytes = sum(r["bytes"] for r in results)
    if read_bytes != written and not errors:
        errors.append(f"wrote {written} bytes but read {read_bytes}")
    return errors


def _timed(
    job: _Job, budget: int, push_buffer: int, batched_reads: bool, bar: _Bar, pids: list[int]
) -> tuple[float, float, int, int, list[dict[str, Any]], float, float]:
    """Push, then read: (shuffle seconds, the workers' CPU seconds, bytes, records, the readers' findings,
    push seconds, the workers' CPU seconds from the pushes' end on)."""
    cpu_before = sum(cpu_seconds(pid) for pid in pids)
    started, pushed, written, records = _push(job, budget, push_buffer, bar)
    cpu_pushed = sum(cpu_seconds(pid) for pid in pids)
    reading, results = _read(job, batched_reads, bar)
    # the reducers' pool start-up is not shuffle time
    seconds = time.perf_counter() - started - (reading - pushed)
    cpu_after = sum(cpu_seconds(pid) for pid in pids)
    return (
        seconds,
        cpu_after - cpu_before,
        written,
        records,
        results,
        pushed - started,
        cpu_after - cpu_pushed,
    )


def _demo_cluster(
    workers: int,
    config: WorkerConfig,
    master_args: list[str] | None,
    curve: bool,
    secret_file: str | None,
) -> LocalCluster:
    """The demo's cluster, its workers in processes of their own (not started yet)."""
    from croupier.services.local import LocalCluster

    return LocalCluster(
        workers,
        processes=True,
        worker_config=config,
        master_args=master_args,
        curve=curve,
        secret_file=secret_file,
    )


def run_demo(
    size: int,
    mappers: int,
    partitions: int,
    workers: int,
    *,
    progress: bool = True,
    replicate: bool = True,
    push_buffer: int = 0,
    worker_config: WorkerConfig | None = None,
    batched_reads: bool = True,
    master_args: list[str] | None = None,  # for the master, e.g. ["--tenants", FILE]
    curve: bool = False,
    secret_file: str | None = None,
    during: Callable[[LocalCluster], AbstractContextManager[Any]] | None = None,
    pace: float = 0.0,
) -> DemoResult:
    """Run the whole demo and return its verdict.

    The clock starts at the first push (after every process has started) and stops
    when the last record is verified. The workers' CPU is counted from just before the
    map pool starts to the end of the reads. ``worker_config`` overrides the workers'
    settings; ``batched_reads=False`` makes reducers open one ``reader`` per partition
    instead of using ``Shuffle.readers``. ``curve``: ZeroMQ CURVE everywhere (``secret_file``).
    ``during(cluster)``: a context around the pushes and reads (e.g. a metrics scraper). ``pace``:
    the map tasks' aggregate write rate, bytes/s (0: unpaced); the reads are never paced.
    """
    import croupier

    budget = max(1, size // mappers)
    expected = [sum(1 for _ in _record_plan(m, budget)) for m in range(mappers)]
    config = worker_config or WorkerConfig(heartbeat_interval=1.0)
    with (
        _demo_cluster(workers, config, master_args, curve, secret_file) as cluster,
        croupier.connect(cluster.master_url, curve_server_key=cluster.curve_server_key) as client,
    ):
        app = client.register_app("demo")
        sh = app.register_shuffle(num_mappers=mappers, num_partitions=partitions, replicate=replicate)
        procs = max(1, min(mappers, multiprocessing.cpu_count()))
        key = cluster.curve_server_key
        job = _Job(cluster.master_url, sh.handle(), mappers, partitions, procs, key, pace)
        bar, pids = _Bar(progress, size), cluster.worker_pids()
        rest = (batched_reads, bar, pids)
        with during(cluster) if during is not None else contextlib.nullcontext():
            seconds, cpu, written, records, results, push_s, read_cpu = _timed(
                job, budget, push_buffer, *rest
            )
        bar.close()
        peak = max((peak_rss(pid) for pid in pids), default=0)
        app.unregister()
    errors = _check(results, expected, written)
    rate = written / seconds / 1e6
    found = (mappers, partitions, workers, errors, replicate, peak, cpu, push_s, read_cpu)
    return DemoResult(not errors, written, seconds, rate, records, *found)


def main_demo(
    size: int,
    mappers: int,
    partitions: int,
    workers: int,
    as_json: bool,
    master_args: list[str] | None = None,
    *,
    curve: bool = False,
    secret_file: str | None = None,
) -> int:
    result = run_demo(
        size,
        mappers,
        partitions,
        workers,
        progress=sys.stderr.isatty() or not as_json,
        master_args=master_args,
        curve=curve,
        secret_file=secret_file,
    )
    if not as_json:
        verdict = "verified" if result.verified else "FAILED"
        print(
            f"croupier demo: {result.records} records, {result.bytes / 1e6:.1f} MB through {workers} workers "
            f"({mappers} mappers -> {partitions} partitions, 2 in-memory replicas"
            f"{', CURVE' if curve else ''}): {verdict}, "
            f"{result.seconds:.2f} s, {result.mb_per_s:.1f} MB/s"
        )
        for e in result.errors:
            print(f"  {e}", file=sys.stderr)
    print(json.dumps(result.to_json()) if as_json else "", end="\n" if as_json else "")
    return 0 if result.verified else 1
