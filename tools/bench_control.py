"""``croupier bench --scenarios control``: MAPPER_END commands per second at the master.

Client processes each keep ``window`` commands in flight, so the rate shows what group
commit buys; the embedded file log is measured, and with ``--ha`` a ZooKeeper-replicated
log too, interleaved run by run. Runs in the caller's thread; the client processes and
any ZooKeeper are stopped before returning.

Each measured run also reports the master's CPU per 1,000 commands (the master runs in
this process: its user + system time over the run, divided by the commands), the client
processes' CPU per 1,000 commands (they share the machine's cores with the master: at a
rate's ceiling both count) and the round trip of ``GET_LOCATIONS`` for a 10,000-partition
shuffle (100 maps ended), asked by one more process every ``PROBE_INTERVAL`` seconds while
the MAPPER_ENDs flow. The master runs with the GIL switch interval ``croupier master`` sets
(``croupier.services._lifecycle.master_switch_interval``), put back afterwards.

Every mode runs twice: one ``MAPPER_END`` per request, and ``BATCH`` per
``MAPPER_END_BATCH`` (``control/file-batch16``, ...), each of their results checked.
"""

from __future__ import annotations

import multiprocessing
import random
import resource
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
# MAPPER_END_BATCH's runs: 16 ends per request, 2 requests of each client in flight (the
# clients' 32 ends in flight, coalesced as a MasterClient shared by a process's writers does)
BATCH = 16
PROBE_PARTITIONS = 10_000  # the GET_LOCATIONS probe's shuffle: every map touched every partition
PROBE_MAPS = 100
PROBE_INTERVAL = 0.01


def _master_cpu() -> float:
    """This process's CPU seconds (user + system): the master's, as it runs here; in a
    client process, that client's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _probe(url: str, app_id: str, shuffle_id: int, stop: Any, out: Any) -> None:
    """GET_LOCATIONS round trips (ms), one every ``PROBE_INTERVAL`` until ``stop`` is set."""
    from croupier.core.commands import encode_command
    from croupier.transports.rpc import RpcClient

    pick = random.Random(7)
    times: list[float] = []
    with RpcClient(url, timeout=30.0, retries=0) as client:
        while not stop.wait(PROBE_INTERVAL):
            msg_type, body = encode_command(
                c.GetLocations(app_id, shuffle_id, pick.randrange(PROBE_PARTITIONS))
            )
            start = time.perf_counter()
            client.call(msg_type, body)
            times.append((time.perf_counter() - start) * 1000)
    out.put(times)


def _probe_shuffle(master: Any, app: str) -> int:
    """A shuffle of ``PROBE_PARTITIONS`` partitions where ``PROBE_MAPS`` maps ended; one more
    map never ends, so that no commit (of workers that do not exist) runs meanwhile."""
    shuffle = c.RegisterShuffle(app, PROBE_MAPS + 1, PROBE_PARTITIONS, replicate=False)
    sid = int(master.request(shuffle, ShuffleSummary).shuffle_id)
    every = encode_bitmap(b"\xff" * (PROBE_PARTITIONS // 8))
    for m in range(PROBE_MAPS):
        master.call(c.MapperEnd(app, sid, m, 0, PROBE_PARTITIONS, every))
    return sid


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else float("nan")


def _client(url: str, app_id: str, shuffle_id: int, maps: list[int], window: int, batch: int = 1) -> float:
    """Pipelined MAPPER_ENDs, ``window`` in flight: many executors, as one process; returns
    this process's CPU seconds over the run (its sending and its client thread). With
    ``batch`` > 1, ``batch`` of them per ``MAPPER_END_BATCH`` request (what a client that
    coalesces its tasks' ends sends), each of the results checked."""
    import threading

    from croupier.core.commands import encode_command
    from croupier.transports.async_rpc import AsyncRpcClient

    requests = max(1, window // batch)
    credits = threading.Semaphore(requests)
    failures: list[BaseException] = []
    client = AsyncRpcClient(timeout=60.0, name="bench")
    client.start()

    def done(reply: Any, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)
        elif batch > 1:
            results = reply.body["results"]
            if not all(r.get("won") for r in results):
                failures.append(RuntimeError(f"a batch's entry did not win: {results}"))
        credits.release()

    try:
        cpu = _master_cpu()
        for i in range(0, len(maps), batch):
            credits.acquire()
            group = maps[i : i + batch]
            command: c.Command = (
                c.MapperEnd(app_id, shuffle_id, group[0], 0, 1, ONE_PARTITION)
                if batch == 1
                else c.MapperEndBatch(app_id, shuffle_id, tuple((m, 0, 1, ONE_PARTITION) for m in group))
            )
            msg_type, body = encode_command(command)
            client.send(url, msg_type, body, (), done)
        for _ in range(requests):
            credits.acquire()
        cpu = _master_cpu() - cpu
    finally:
        client.stop()
    if failures:
        raise failures[0]
    return cpu


def _register(url: str, commands: int, probe: bool) -> tuple[str, int, int | None]:
    """A worker, an app and a shuffle of ``commands`` maps (and the probe's shuffle, with ``probe``)."""
    from croupier.transports.master_client import MasterClient

    with MasterClient(url, timeout=30.0, deadline=60.0) as master:
        master.request(
            c.RegisterWorker("bench-w0", "127.0.0.1", 1, 2, 3, 4, 10**6, "bench"), RegisterWorkerReply
        )
        app = master.request(c.RegisterApp("bench"), RegisterAppReply).app_id
        sid = master.request(c.RegisterShuffle(app, commands, 1, replicate=False), ShuffleSummary).shuffle_id
        return app, sid, _probe_shuffle(master, app) if probe else None


def control_rate(
    url: str,
    *,
    commands: int = 20_000,
    clients: int = 4,
    window: int = 32,
    probe: bool = False,
    batch: int = 1,
) -> dict[str, Any]:
    """Send ``commands`` MAPPER_ENDs from ``clients`` processes, ``window`` in flight each.

    With ``probe``, a GET_LOCATIONS probe runs alongside (``get_locations_ms``: P50, P99, n).
    ``master_cpu_ms_per_1000`` is this process's CPU over the run: the master's when it runs here;
    ``clients_cpu_ms_per_1000`` the client processes' together (they share the machine with it).
    """
    app, sid, probe_sid = _register(url, commands, probe)
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    prober = None
    with ProcessPoolExecutor(clients, mp_context=ctx) as pool:
        for _ in range(clients):
            pool.submit(_client, url, app, sid, [], 1).result()  # start the processes first
        if probe_sid is not None:
            prober = ctx.Process(target=_probe, args=(url, app, probe_sid, stop, out), daemon=True)
            prober.start()
        cpu = _master_cpu()
        started = time.perf_counter()
        futures = [
            pool.submit(_client, url, app, sid, list(range(i, commands, clients)), window, batch)
            for i in range(clients)
        ]
        clients_cpu = sum(f.result() for f in futures)
        seconds = time.perf_counter() - started
        cpu = _master_cpu() - cpu
    result: dict[str, Any] = {
        "commands": commands,
        "clients": clients,
        "batch": batch,
        "seconds": round(seconds, 3),
        "per_s": round(commands / seconds),
        "master_cpu_ms_per_1000": round(cpu * 1e6 / commands, 1),
        "clients_cpu_ms_per_1000": round(clients_cpu * 1e6 / commands, 1),
    }
    if prober is not None:
        stop.set()
        times: list[float] = out.get(timeout=60)
        prober.join(timeout=30)
        result["get_locations_ms"] = {
            "p50": _quantile(times, 0.5),
            "p99": _quantile(times, 0.99),
            "n": len(times),
        }
    return result


def _file_master_rate(commands: int, clients: int, run: int, batch: int = 1) -> dict[str, Any]:
    from croupier.services.master import MasterService

    with tempfile.TemporaryDirectory() as tmp, MasterService("tcp://127.0.0.1:0", Path(tmp) / "m") as m:
        control_rate(m.url, commands=min(2000, commands), clients=clients, batch=batch)  # warm-up
        return control_rate(m.url, commands=commands, clients=clients, probe=True, batch=batch)


class _ZooKeeperRuns:
    """One ZooKeeper for every run (a JVM needs warming up), a fresh root per run."""

    def __init__(self) -> None:
        from croupier.ha.zkserver import LocalZooKeeper

        self._tmp = tempfile.TemporaryDirectory()
        self.zk = LocalZooKeeper(Path(self._tmp.name) / "zk").start()

    def __call__(self, commands: int, clients: int, run: int, batch: int = 1) -> dict[str, Any]:
        from croupier.services.ha_master import HaMasterService

        with HaMasterService("tcp://127.0.0.1:0", self.zk.url(f"/bench{run}-{batch}")) as member:
            deadline = time.monotonic() + 30
            while member.role != "leader":
                if time.monotonic() > deadline:
                    raise TimeoutError("the master did not become leader")
                time.sleep(0.05)
            control_rate(member.url, commands=min(2000, commands), clients=clients, batch=batch)  # warm-up
            return control_rate(member.url, commands=commands, clients=clients, probe=True, batch=batch)

    def close(self) -> None:
        self.zk.stop()
        self._tmp.cleanup()


def _summary(got: list[dict[str, Any]], runs: int, commands: int, clients: int) -> dict[str, Any]:
    """Medians over the runs of one mode (of the GET_LOCATIONS quantiles: each run's, median)."""
    rates = [r["per_s"] for r in got]
    probes = [r["get_locations_ms"] for r in got if "get_locations_ms" in r]
    return {
        "median_per_s": statistics.median(rates),
        "min_per_s": min(rates),
        "max_per_s": max(rates),
        "master_cpu_ms_per_1000": statistics.median(r["master_cpu_ms_per_1000"] for r in got),
        "clients_cpu_ms_per_1000": statistics.median(r["clients_cpu_ms_per_1000"] for r in got),
        "get_locations_p50_ms": statistics.median(p["p50"] for p in probes) if probes else None,
        "get_locations_p99_ms": statistics.median(p["p99"] for p in probes) if probes else None,
        "runs": runs,
        "commands": commands,
        "clients": clients,
    }


def _mode(name: str, batch: int) -> str:
    return name if batch == 1 else f"{name}-batch{batch}"


def control_scenarios(*, ha: bool, runs: int, commands: int, clients: int) -> dict[str, Any]:
    """The file log (and with ``ha`` ZooKeeper) rates over ``runs``, printed and returned."""
    from croupier.services._lifecycle import master_switch_interval

    results: dict[str, Any] = {}
    zk_runs = _ZooKeeperRuns() if ha else None
    modes: dict[str, Any] = {"file": _file_master_rate}
    if zk_runs is not None:
        modes["zookeeper"] = zk_runs
    runs_by_mode: dict[str, list[dict[str, Any]]] = {
        _mode(name, batch): [] for name in modes for batch in (1, BATCH)
    }
    previous = master_switch_interval()  # as ``croupier master`` runs it
    try:
        # interleave the modes, so that both see the same noise on a shared machine
        for run in range(runs):
            for name, fn in modes.items():
                for batch in (1, BATCH):
                    runs_by_mode[_mode(name, batch)].append(fn(commands, clients, run, batch))
    finally:
        master_switch_interval(previous)
        if zk_runs is not None:
            zk_runs.close()
    for name, got in runs_by_mode.items():
        results[f"control/{name}"] = _summary(got, runs, commands, clients)
    _report(results, list(modes))
    return results


def _report(results: dict[str, Any], modes: list[str]) -> None:
    """Print each mode's figures; add the ratios (ZooKeeper to file, batched to one per request)."""
    for key, r in list(results.items()):
        print(
            f"{key:26s} mapper_end/s median {r['median_per_s']:>8}  (min {r['min_per_s']},"
            f" max {r['max_per_s']}, {r['runs']} runs of {r['commands']} from {r['clients']} clients)"
        )
        print(
            f"{'':26s} CPU per 1,000 commands: master {r['master_cpu_ms_per_1000']} ms, the"
            f" {r['clients']} clients {r['clients_cpu_ms_per_1000']} ms (medians);"
            f" GET_LOCATIONS of a {PROBE_PARTITIONS:,}-partition shuffle meanwhile:"
            f" P50 {r['get_locations_p50_ms']} ms, P99 {r['get_locations_p99_ms']} ms"
        )
    if "control/file" in results and "control/zookeeper" in results:
        ratio = results["control/zookeeper"]["median_per_s"] / results["control/file"]["median_per_s"]
        print(f"zookeeper / file log: {ratio:.2f}")
        results["ratio_zookeeper_to_file"] = round(ratio, 3)
    for name in modes:
        single, batched = results[f"control/{name}"], results[f"control/{_mode(name, BATCH)}"]
        ratio = batched["median_per_s"] / single["median_per_s"]
        print(f"{name}: {BATCH} per MAPPER_END_BATCH / one per request: {ratio:.2f}")
        results[f"ratio_batch{BATCH}_to_single/{name}"] = round(ratio, 3)
