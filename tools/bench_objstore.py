"""Object-store client choice (issue 26): boto3 against obstore on one S3 server, side by side.

    AWS_ENDPOINT_URL=... AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_REGION=... \\
        python -m croupier.tools.bench_objstore --bucket bench --objects 16 --rounds 2
    ... python -m croupier.tools.bench_objstore --bucket bench --reads 128

Each round, alternating the clients: ``objects`` puts of 8 MiB (4 threads), then ranged GETs of
1 MiB over all of them (4 threads); throughput in MiB/s and the process's CPU per MiB (user +
system, every thread, the Rust ones included). boto3 is not a Croupier dependency: it is
imported only here (``pip install boto3``). The bucket is created with boto3 when missing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MIB = 1 << 20
SIZE = 8 * MIB
RANGE = MIB


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _measure(name: str, mib: float, job: Callable[[], None]) -> str:
    t0, c0 = time.perf_counter(), _cpu()
    job()
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return f"{name:<28} {mib / wall:8.1f} MiB/s {cpu / mib * 1000:8.2f} ms CPU/MiB"


def _clients(bucket: str) -> tuple[Any, Any]:
    boto3 = importlib.import_module("boto3")
    b = boto3.client("s3")
    try:
        b.create_bucket(Bucket=bucket)
    except Exception as exc:  # already there (BucketAlreadyOwnedByYou) is fine
        print(f"create_bucket: {type(exc).__name__}")
    from croupier.transports.objstore import open_object_store

    return b, open_object_store(f"s3://{bucket}/bench")


def run(bucket: str, objects: int, rounds: int) -> list[str]:
    b, o = _clients(bucket)
    data = os.urandom(SIZE)
    mib = objects * SIZE / MIB

    def each(fn: Callable[[int], object]) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(fn, range(objects)))

    def b_get(i: int) -> None:
        for off in range(0, SIZE, RANGE):
            rng = f"bytes={off}-{off + RANGE - 1}"
            b.get_object(Bucket=bucket, Key=f"bench/boto3/{i}", Range=rng)["Body"].read()

    def o_get(i: int) -> None:
        for off in range(0, SIZE, RANGE):
            o.get_range(f"obstore/{i}", off, RANGE)

    lines = []
    for _ in range(rounds):
        lines.append(_measure("boto3 put 8 MiB", mib, lambda: each(
            lambda i: b.put_object(Bucket=bucket, Key=f"bench/boto3/{i}", Body=data))))  # fmt: skip
        lines.append(_measure("obstore put 8 MiB", mib, lambda: each(lambda i: o.put(f"obstore/{i}", data))))
        lines.append(_measure("boto3 ranged get 1 MiB", mib, lambda: each(b_get)))
        lines.append(_measure("obstore ranged get 1 MiB", mib, lambda: each(o_get)))
    o.close()
    return lines


def reads(url: str, mib: int, partitions: int = 16) -> list[str]:
    """Offload CPU and read throughput: a 3-worker process cluster run with ``--object-store url``
    takes ``mib`` MiB; the workers' CPU-seconds from the commit until ``wait_offloaded`` (the
    offload's cost), then every partition read from the workers, then, every worker killed
    and declared lost, from the store (MB/s and the reader's CPU per MiB)."""
    import tempfile

    import croupier
    from croupier.core.config import MasterConfig, WorkerConfig
    from croupier.services.local import LocalCluster
    from croupier.tools.proc import cpu_seconds

    record = os.urandom(1000)
    per_map = mib * MIB // 4 // len(record)
    with (
        tempfile.TemporaryDirectory(prefix="croupier-bench-objstore-") as tmp,
        LocalCluster(
            3,
            tmp,
            processes=True,
            master_config=MasterConfig(worker_timeout=3.0),
            worker_config=WorkerConfig(heartbeat_interval=0.5, memory_tier_max=0, object_store=url),
        ) as cluster,
        croupier.connect(cluster.master_url) as client,
    ):
        client.object_store = url
        app = client.register_app("bench-objstore")
        sh = app.register_shuffle(num_mappers=4, num_partitions=partitions)
        for m in range(4):
            with sh.writer(m) as w:
                for i in range(per_map):
                    w.write(i % partitions, record)
        pids = cluster.worker_pids()
        before = sum(cpu_seconds(p) for p in pids)
        sh.wait_offloaded(600)
        offload_cpu = sum(cpu_seconds(p) for p in pids) - before
        total = 4 * per_map * len(record)
        lines = [f"offload: {offload_cpu:.2f} worker CPU-s for {total / MIB:.0f} MiB (x2 copies)"]

        def read_all(name: str) -> None:
            t0, c0 = time.perf_counter(), _cpu()
            n = sum(len(r) for p in range(partitions) for r in sh.reader(p))
            wall, cpu = time.perf_counter() - t0, _cpu() - c0
            assert n == total, f"{name}: read {n} bytes of {total}"
            lines.append(
                f"read from {name:<8} {n / 1e6 / wall:8.1f} MB/s {cpu / (n / MIB) * 1000:8.2f} ms CPU/MiB"
            )

        read_all("workers")
        for i in range(3):
            cluster.kill_worker(i)
        while any(w["status"] != "lost" for w in cluster.status()["workers"]):
            time.sleep(0.2)  # the master declares them lost: readers go to the store first
        read_all("store")
        app.unregister()
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bucket", default="bench")
    parser.add_argument("--objects", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reads", metavar="MIB", type=int, help="measure offload CPU and reads instead")
    args = parser.parse_args(argv)
    lines = (
        reads(f"s3://{args.bucket}/reads", args.reads)
        if args.reads
        else run(args.bucket, args.objects, args.rounds)
    )
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
