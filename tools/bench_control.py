"""``croupier bench --scenarios control``: MAPPER_END commands per second at the master.

Client processes each keep ``window`` commands in flight, so the rate shows what group
commit buys; the embedded file log is measured, and with ``--ha`` a ZooKeeper-replicated
log too, interleaved run by run. Runs in the caller's thread; the client processes and
any ZooKeeper are stopped before returning.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap
from croupier.core.replies import RegisterAppReply, RegisterWorkerReply, ShuffleSummary

__all__ = ["control_rate", "control_scenarios"]


# the shuffles here have one partition, and every map touches it
ONE_PARTITION = encode_bitmap(b"\x01")


def _client(url: str, app_id: str, shuffle_id: int, maps: list[int], window: int) -> float:
    """Pipelined MAPPER_ENDs, ``window`` in flight: many executors, as one process."""
    import threading

    from croupier.core.commands import encode_command
    from croupier.transports.async_rpc import AsyncRpcClient

    credits = threading.Semaphore(window)
    failures: list[BaseException] = []
    client = AsyncRpcClient(timeout=60.0, name="bench")
    client.start()

    def done(reply: object, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)
        credits.release()

    try:
        start = time.perf_counter()
        for m in maps:
            credits.acquire()
            msg_type, body = encode_command(c.MapperEnd(app_id, shuffle_id, m, 0, 1, ONE_PARTITION))
            client.send(url, msg_type, body, (), done)
        for _ in range(window):
            credits.acquire()
        elapsed = time.perf_counter() - start
    finally:
        client.stop()
    if failures:
        raise failures[0]
    return elapsed


def control_rate(url: str, *, commands: int = 20_000, clients: int = 4, window: int = 32) -> dict[str, Any]:
    """Send ``commands`` MAPPER_ENDs from ``clients`` processes, ``window`` in flight each."""
    from croupier.transports.master_client import MasterClient

    with MasterClient(url, timeout=30.0, deadline=60.0) as master:
        master.request(
            c.RegisterWorker("bench-w0", "127.0.0.1", 1, 2, 3, 4, 10**6, "bench"), RegisterWorkerReply
        )
        app = master.request(c.RegisterApp("bench"), RegisterAppReply).app_id
        sid = master.request(c.RegisterShuffle(app, commands, 1, replicate=False), ShuffleSummary).shuffle_id
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(clients, mp_context=ctx) as pool:
        for _ in range(clients):
            pool.submit(_client, url, app, sid, [], 1).result()  # start the processes first
        started = time.perf_counter()
        futures = [
            pool.submit(_client, url, app, sid, list(range(i, commands, clients)), window)
            for i in range(clients)
        ]
        for f in futures:
            f.result()
        seconds = time.perf_counter() - started
    return {
        "commands": commands,
        "clients": clients,
        "seconds": round(seconds, 3),
        "per_s": round(commands / seconds),
    }


def _file_master_rate(commands: int, clients: int, run: int) -> dict[str, Any]:
    from croupier.services.master import MasterService

    with tempfile.TemporaryDirectory() as tmp, MasterService("tcp://127.0.0.1:0", Path(tmp) / "m") as m:
        control_rate(m.url, commands=min(2000, commands), clients=clients)  # warm-up, not counted
        return control_rate(m.url, commands=commands, clients=clients)


class _ZooKeeperRuns:
    """One ZooKeeper for every run (a JVM needs warming up), a fresh root per run."""

    def __init__(self) -> None:
        from croupier.ha.zkserver import LocalZooKeeper

        self._tmp = tempfile.TemporaryDirectory()
        self.zk = LocalZooKeeper(Path(self._tmp.name) / "zk").start()

    def __call__(self, commands: int, clients: int, run: int) -> dict[str, Any]:
        from croupier.services.ha_master import HaMasterService

        with HaMasterService("tcp://127.0.0.1:0", self.zk.url(f"/bench{run}")) as member:
            deadline = time.monotonic() + 30
            while member.role != "leader":
                if time.monotonic() > deadline:
                    raise TimeoutError("the master did not become leader")
                time.sleep(0.05)
            control_rate(member.url, commands=min(2000, commands), clients=clients)  # warm-up
            return control_rate(member.url, commands=commands, clients=clients)

    def close(self) -> None:
        self.zk.stop()
        self._tmp.cleanup()


def control_scenarios(*, ha: bool, runs: int, commands: int, clients: int) -> dict[str, Any]:
    """The file log (and with ``ha`` ZooKeeper) rates over ``runs``, printed and returned."""
    results: dict[str, Any] = {}
    zk_runs = _ZooKeeperRuns() if ha else None
    modes: dict[str, Any] = {"file": _file_master_rate}
    if zk_runs is not None:
        modes["zookeeper"] = zk_runs
    rates_by_mode: dict[str, list[int]] = {name: [] for name in modes}
    try:
        # interleave the modes, so that both see the same noise on a shared machine
        for run in range(runs):
            for name, fn in modes.items():
                rates_by_mode[name].append(fn(commands, clients, run)["per_s"])
    finally:
        if zk_runs is not None:
            zk_runs.close()
    for name, rates in rates_by_mode.items():
        results[f"control/{name}"] = {
            "median_per_s": statistics.median(rates),
            "min_per_s": min(rates),
            "max_per_s": max(rates),
            "runs": runs,
            "commands": commands,
            "clients": clients,
        }
    for key, r in results.items():
        print(
            f"{key:20s} mapper_end/s median {r['median_per_s']:>8}  (min {r['min_per_s']},"
            f" max {r['max_per_s']}, {r['runs']} runs of {r['commands']} from {r['clients']} clients)"
        )
    if "control/file" in results and "control/zookeeper" in results:
        ratio = results["control/zookeeper"]["median_per_s"] / results["control/file"]["median_per_s"]
        print(f"zookeeper / file log: {ratio:.2f}")
        results["ratio_zookeeper_to_file"] = round(ratio, 3)
    return results
