"""The floor under a push's ack on this machine: bare ZeroMQ round trips between processes.

A replicated PUSH is two round trips in series, each between processes: the writer to the
primary, and the primary to the replica before it answers. This measures the same shape
with nothing of Croupier in it, in the same run as the push ack figures it is compared
with: a DEALER sends ``size`` bytes to a ROUTER in another process that answers two bytes
(``direct``), or to a relay process that forwards them to that echo process and answers once
the echo did (``relayed``). One request at a time, the two kinds in turn, ``interval``
seconds apart (an idle gap, as between paced pushes). Client-side times, in milliseconds.
``Probe`` does the same on a thread while entered, so that it can run during a shuffle.

``python -m croupier.tools.zmq_floor [SIZE] [COUNT] [INTERVAL_S]`` prints one JSON line.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import zmq

from croupier.core.config import parse_size

__all__ = ["main", "zmq_floor"]


def _serve(conn: Connection, before_answer: Callable[[list[zmq.Frame]], None]) -> None:
    """A ROUTER on a free port (its URL sent on ``conn``) that answers every request with two
    bytes, after ``before_answer(frames)``, until a request says ``stop``."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    try:
        while True:
            frames = sock.recv_multipart(copy=False)
            if frames[-1].bytes == b"stop":
                return
            before_answer(frames)
            sock.send_multipart([frames[0], b"ok"])
    finally:
        sock.close(linger=0)
        ctx.term()


def _echo(conn: Connection) -> None:
    _serve(conn, lambda frames: None)


def _relay(conn: Connection, target: str) -> None:
    ctx = zmq.Context()
    back = ctx.socket(zmq.DEALER)
    back.connect(target)

    def forward(frames: list[zmq.Frame]) -> None:
        back.send(frames[-1], copy=False)
        back.recv()

    try:
        _serve(conn, forward)
    finally:
        back.close(linger=0)
        ctx.term()


def _start(target: Any, *args: Any) -> tuple[multiprocessing.process.BaseProcess, str]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child, *args), daemon=True)
    proc.start()
    if not parent.poll(30):
        proc.kill()
        raise RuntimeError("the echo process did not start")
    url: str = parent.recv()
    return proc, url


class Probe:
    """Round trips direct and relayed, alternately, every ``interval`` seconds, on a thread of
    its own, while entered (e.g. during a shuffle: the floor under the same load)."""

    def __init__(self, size: int, interval: float) -> None:
        self.size = size
        self.interval = interval
        self.times: dict[str, list[float]] = {"direct": [], "relayed": []}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: list[multiprocessing.process.BaseProcess] = []

    def __enter__(self) -> Probe:
        echo, echo_url = _start(_echo)
        self._procs.append(echo)
        relay, relay_url = _start(_relay, echo_url)
        self._procs.append(relay)
        self._thread = threading.Thread(target=self._run, args=(echo_url, relay_url), name="zmq-floor")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for proc in self._procs:
            proc.kill()
            proc.join(5)

    def run_for(self, count: int) -> None:
        """Until ``count`` round trips of each kind are done (then stop as on exit)."""
        while min(len(v) for v in self.times.values()) < count and not self._stop.is_set():
            time.sleep(0.01)

    def _run(self, echo_url: str, relay_url: str) -> None:
        payload = os.urandom(max(1, self.size))
        ctx = zmq.Context()
        socks = {"direct": ctx.socket(zmq.DEALER), "relayed": ctx.socket(zmq.DEALER)}
        socks["direct"].connect(echo_url)
        socks["relayed"].connect(relay_url)
        try:
            while not self._stop.is_set():
                for name, sock in socks.items():
                    t0 = time.perf_counter()
                    sock.send(payload, copy=False)
                    sock.recv()
                    self.times[name].append((time.perf_counter() - t0) * 1e3)
                    self._stop.wait(self.interval)
        finally:
            for sock in socks.values():
                sock.close(linger=0)
            ctx.term()

    def summary(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "interval_s": self.interval,
            **{name: _summary(ms) for name, ms in self.times.items()},
        }


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms) or [0.0]
    n = len(ms)
    return {
        "count": n,
        "p50_ms": round(ordered[len(ordered) // 2], 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max_ms": round(ordered[-1], 3),
    }


def zmq_floor(size: int, count: int = 500, interval: float = 0.005) -> dict[str, Any]:
    """``count`` round trips of ``size`` bytes of each kind, alternately (see the module docstring)."""
    with Probe(size, interval) as probe:
        probe.run_for(count)
    found = probe.summary()
    for name in ("direct", "relayed"):  # the thread may have done one more of each
        del probe.times[name][count:]
    return {**found, **{name: _summary(probe.times[name]) for name in ("direct", "relayed")}}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    size = parse_size(args[0]) if args else 140_000
    count = int(args[1]) if len(args) > 1 else 500
    interval = float(args[2]) if len(args) > 2 else 0.005
    print(json.dumps(zmq_floor(size, count, interval), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
