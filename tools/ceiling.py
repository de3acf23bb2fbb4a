"""The ceiling: a bare push/replicate/flush/fetch pipeline with no service logic.

``croupier bench`` runs it beside the service on the same bytes and reports the service's
rate as a ratio of it (scenarios ``ceiling`` and ``ceiling-tuned``). It also runs alone::

    python -m croupier.tools.ceiling --transport tcp --total 1GiB --reps 3 [--tuned]

Processes (see :mod:`croupier.tools.ceiling_roles`): 2 servers, ``mappers`` mappers that
push every block to both servers (2 in-memory replicas), ``reducers`` reducers. Phases,
each timed on the wall clock across all participants:

- push: the mappers push ``total`` logical bytes (twice that on the wire), a blake3
  digest per block on the mapper (``hash``), acked once in server RAM;
- flush: both servers at once write their primary blocks, one file per partition,
  fsync, and drop RAM (replicas are not written unless ``flush_replicas``);
- fetch: the reducers pull every partition in ``chunk``-sized pieces (from the page
  cache unless ``cold``).

``e2e_MBps`` is ``total`` over the sum of the three phases. The **tuned** variant is the
physical reference: the servers' heap is pre-faulted and kept (glibc: one arena, a 32 MiB
mmap threshold, no trimming), and flushes use O_DIRECT through one aligned staging buffer
allocated and touched once. A filesystem that refuses O_DIRECT gets page-cache writes and
a ``note`` in the result saying so.

``worker_cpu_s_per_gib`` is the servers' CPU (user + system, from ``/proc``) from READY
to the end of the fetch, per GiB pushed: the servers play the service's workers.

This module runs in the caller's process and thread; it owns the child processes and
the temporary directory of one run, and removes both before returning.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

import zmq

from croupier.tools.ceiling_roles import MiB
from croupier.tools.proc import cpu_seconds

__all__ = ["CeilingOptions", "main", "run_once"]

# glibc settings of the tuned servers (see ceiling_roles._prewarm_heap)
_TUNED_MALLOC = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_THRESHOLD_": str(32 * MiB),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "MALLOC_TOP_PAD_": str(64 * MiB),
}


@dataclass(frozen=True)
class CeilingOptions:
    """One ceiling run. ``directory`` is where the partition files go (the temp dir by default)."""

    total: int = 2048 * MiB
    transport: str = "ipc"
    block: int = MiB
    chunk: int = MiB
    window: int = 16
    parts: int = 16
    mappers: int = 2
    reducers: int = 2
    hash: bool = True
    flush_replicas: bool = False
    cold: bool = False
    timeout: float = 180.0
    prewarm_mib: int = 0
    malloc_env: bool = False
    odirect: bool = False
    directory: str | None = None

    def tuned(self) -> CeilingOptions:
        """The physical reference: a pre-faulted, kept heap and O_DIRECT flushes.

        Each server holds ``total`` bytes at the end of the push (its primaries and the
        other's replicas), so that much heap (plus slack for libzmq) is faulted in first.
        """
        return dataclasses.replace(self, prewarm_mib=self.total // MiB + 64, malloc_env=True, odirect=True)


def _spawn(role: str, env: dict[str, str] | None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "croupier.tools.ceiling_roles", role, json.dumps(kwargs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def _collect(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[dict[str, Any]]:
    """Each process's last stdout line, as JSON, once it has exited."""
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"ceiling {proc.args!r}: {err[-2000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def _span(outs: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds from the first participant's start to the last one's end, and the bytes."""
    return max(o["t1"] for o in outs) - min(o["t0"] for o in outs), sum(o["bytes"] for o in outs)


class _Run:
    """The processes and control sockets of one run; ``close`` ends and reaps them all."""

    def __init__(self, options: CeilingOptions, directory: str) -> None:
        self.options = options
        self.directory = directory
        self.env = dict(os.environ, **_TUNED_MALLOC) if options.malloc_env else None
        self.procs: list[subprocess.Popen[str]] = []
        self.ctx = zmq.Context()
        self.control: list[zmq.Socket[bytes]] = []
        self.addrs: list[str] = []

    def start_servers(self) -> list[int]:
        """Start both servers and connect to them; their pids."""
        o = self.options
        for sid in range(2):
            addr = f"ipc://{self.directory}/srv{sid}.ipc" if o.transport == "ipc" else "tcp://127.0.0.1:*"
            proc = _spawn(
                "server",
                self.env,
                sid=sid,
                addr=addr,
                directory=self.directory,
                flush_replicas=o.flush_replicas,
                cold=o.cold,
                prewarm_mib=o.prewarm_mib,
                odirect=o.odirect,
            )
            self.procs.append(proc)
            assert proc.stdout is not None
            ready = proc.stdout.readline().split()
            if ready[:1] != ["READY"]:
                raise RuntimeError(f"ceiling server {sid} did not start: {_tail(proc.stderr)}")
            self.addrs.append(ready[1])
            sock = self.ctx.socket(zmq.DEALER)
            sock.connect(ready[1])
            self.control.append(sock)
        return [p.pid for p in self.procs]

    def push(self) -> tuple[float, int]:
        o = self.options
        start = time.time() + 1.0
        mappers = [
            _spawn(
                "mapper",
                self.env,
                mid=m,
                addrs=self.addrs,
                total=o.total // o.mappers,
                block=o.block,
                window=o.window,
                parts=o.parts,
                do_hash=o.hash,
                start=start,
            )
            for m in range(o.mappers)
        ]
        self.procs += mappers
        return _span(_collect(mappers, o.timeout))

    def flush(self) -> tuple[float, list[dict[str, Any]]]:
        """Both servers flush at once; the seconds until both are done, and their reports."""
        started = time.perf_counter()
        for sock in self.control:
            sock.send_multipart([b"F"])
        reports = [json.loads(self._reply(sock)[1]) for sock in self.control]
        return time.perf_counter() - started, reports

    def fetch(self) -> tuple[float, int]:
        o = self.options
        start = time.time() + 0.5
        reducers = [
            _spawn(
                "reducer",
                self.env,
                rid=r,
                addrs=self.addrs,
                parts=list(range(o.parts))[r :: o.reducers],
                chunk=o.chunk,
                do_hash=o.hash,
                start=start,
            )
            for r in range(o.reducers)
        ]
        self.procs += reducers
        return _span(_collect(reducers, o.timeout))

    def _reply(self, sock: zmq.Socket[bytes]) -> list[bytes]:
        if not sock.poll(int(self.options.timeout * 1000)):
            raise RuntimeError("a ceiling server did not answer in time")
        return sock.recv_multipart()

    def close(self) -> None:
        for sock in self.control:
            sock.send_multipart([b"Q"])
            sock.poll(5000)
            sock.close(linger=0)
        self.ctx.term()
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.communicate()  # reaps it and closes its pipes


def _tail(stream: IO[str] | None) -> str:
    return stream.read()[-2000:] if stream is not None else ""


def run_once(options: CeilingOptions) -> dict[str, Any]:
    """One push, flush and fetch; rates in MB/s (10**6 bytes), seconds, and the servers' CPU.

    Raises:
        RuntimeError: a process failed or a server stopped answering.
    """
    with tempfile.TemporaryDirectory(prefix="ceiling-", dir=options.directory) as directory:
        run = _Run(options, directory)
        try:
            servers = run.start_servers()
            cpu_before = sum(cpu_seconds(pid) for pid in servers)
            push_s, pushed = run.push()
            flush_s, reports = run.flush()
            fetch_s, fetched = run.fetch()
            cpu = sum(cpu_seconds(pid) for pid in servers) - cpu_before
        finally:
            run.close()
    if fetched != pushed:
        raise RuntimeError(f"ceiling fetched {fetched} bytes of {pushed}")
    return {
        "bytes": pushed,
        "push_MBps": pushed / push_s / 1e6,
        "push_wire_MBps": 2 * pushed / push_s / 1e6,
        "flush_MBps": sum(r["written"] for r in reports) / flush_s / 1e6,
        "fetch_MBps": fetched / fetch_s / 1e6,
        "e2e_MBps": pushed / (push_s + flush_s + fetch_s) / 1e6,
        "push_s": push_s,
        "flush_s": flush_s,
        "fetch_s": fetch_s,
        "worker_cpu_s_per_gib": cpu / (pushed / 2**30),
        "odirect": all(r["odirect"] for r in reports),
        "note": "; ".join(sorted({r["note"] for r in reports if r["note"]})),
    }


def _parser() -> argparse.ArgumentParser:
    from croupier.core.config import parse_size

    defaults = CeilingOptions()
    ap = argparse.ArgumentParser(prog="python -m croupier.tools.ceiling", description=__doc__.split("\n")[0])
    ap.add_argument("--transport", default=defaults.transport, choices=["ipc", "tcp"])
    for name in ("total", "block", "chunk"):
        ap.add_argument(
            f"--{name}", type=parse_size, default=getattr(defaults, name), help="bytes, e.g. 1GiB"
        )
    for name in ("window", "parts", "mappers", "reducers", "prewarm_mib"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    for name in ("hash", "flush_replicas", "cold", "malloc_env", "odirect"):
        flag = f"--{name.replace('_', '-')}"
        ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=getattr(defaults, name))
    ap.add_argument("--timeout", type=float, default=defaults.timeout, help="seconds per phase")
    ap.add_argument("--directory", help="where the partition files go (default: the temp directory)")
    ap.add_argument("--tuned", action="store_true", help="pre-faulted heap and O_DIRECT flushes")
    ap.add_argument("--reps", type=int, default=3)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``--reps`` times; print each run, then ``SUMMARY <options JSON> <medians JSON>``."""
    args = vars(_parser().parse_args(argv))
    reps, tuned = args.pop("reps"), args.pop("tuned")
    options = CeilingOptions(**args)
    if tuned:
        options = options.tuned()
    runs = []
    for _ in range(reps):
        runs.append(run_once(options))
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in runs[-1].items()}))
    summary = {
        key: {
            "median": round(statistics.median(r[key] for r in runs), 3),
            "min": round(min(r[key] for r in runs), 3),
            "max": round(max(r[key] for r in runs), 3),
        }
        for key in ("push_MBps", "flush_MBps", "fetch_MBps", "e2e_MBps", "worker_cpu_s_per_gib")
    }
    print("SUMMARY", json.dumps(dataclasses.asdict(options)), json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
