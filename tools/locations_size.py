"""Reply bytes and master CPU of the locations calls for a huge shuffle (issue 13).

Usage::

    python -m croupier.tools.locations_size [--maps 10000000] [--partitions 4] \\
        [--calls 10] [--python PATH ...]

Writes a data directory whose snapshot holds one shuffle of ``--maps`` maps, all ended
(winning attempt 0, but for a few maps that won with attempt 1 and declared one partition
only), starts a real ``croupier master`` on it (``--python``: the interpreter to run it
with, e.g. another checkout's venv, to measure an older master on the same data; repeat
it to measure several in one run), and prints one JSON object per interpreter:

- ``load_s``: from starting the master to its first answer;
- per call (``get_locations``, ``get_locations_batch`` of every partition, ``get_shuffle``):
  ``bytes``, the encoded reply body, and ``first_cpu_s`` / ``cpu_s``, the master's CPU
  (user + system, from ``/proc``) for the first call and the mean of ``--calls`` more,
  and ``wall_s`` likewise as the client saw it (the mean).

The master and its temporary directory are removed at the end. It needs about 4 GiB of
memory at 10⁷ maps (the master's state and its snapshot load).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.commands import encode_command
from croupier.core.decide import decide
from croupier.core.events import encode_event
from croupier.core.state import MasterState, apply
from croupier.core.wire import Header, Kind, MsgType, encode_body
from croupier.ha.filelog import FileEventLog
from croupier.tools.proc import cpu_seconds
from croupier.transports.master_client import MasterClient

__all__ = ["main", "measure", "write_data_dir"]

APP = "bench"


def _exceptions(maps: int) -> dict[int, int]:
    """Maps that won with attempt 1 (a retry), spread over the id range."""
    return {m: 1 for m in (1, 17, maps // 3, maps // 2, maps - 1) if 0 <= m < maps}


def _winner_items(maps: int, partitions: int) -> Iterator[str]:
    """The snapshot's ``winners`` entries as JSON text: ``[map, attempt, touched, bitmap]``."""
    every = json.dumps(encode_bitmap(from_partitions(range(partitions), partitions)))
    one = json.dumps(encode_bitmap(from_partitions([0], partitions)))
    late = _exceptions(maps)
    for m in range(maps):
        if m in late:
            yield f"[{m},{late[m]},1,{one}]"
        else:
            yield f"[{m},0,{partitions},{every}]"


def write_data_dir(directory: Path, maps: int, partitions: int) -> None:
    """A master data directory: the registration events, then a snapshot with every map ended."""
    state = MasterState()
    rng = random.Random(0)
    records: list[bytes] = []
    for cmd in (
        c.RegisterWorker("w0", "127.0.0.1", 1, 2, 3, 4, 1000, "i0"),
        c.RegisterWorker("w1", "127.0.0.1", 5, 6, 7, 8, 1000, "i1"),
        c.RegisterApp("bench", APP),
        c.RegisterShuffle(APP, maps, partitions, shuffle_id=0),
    ):
        for event in decide(state, cmd, time.time(), rng)[1]:
            apply(state, event)
            records.append(encode_event(event))
    state.seq = len(records)
    doc = json.dumps(state.to_json(), separators=(",", ":"))
    head, tail = doc.split('"winners":[]', 1)  # the shuffle's: nothing has ended yet
    out = zlib.compressobj(6)
    parts = [out.compress(f'{head}"winners":['.encode())]
    batch: list[str] = []
    for i, item in enumerate(_winner_items(maps, partitions)):
        batch.append(item if i == 0 else "," + item)
        if len(batch) == 100_000:
            parts.append(out.compress("".join(batch).encode()))
            batch = []
    parts.append(out.compress(("".join(batch) + "]" + tail).encode()))
    parts.append(out.flush())
    log = FileEventLog(directory)
    try:
        log.append(records)
        log.write_snapshot(state.seq, b"".join(parts))
    finally:
        log.close()


class _RawClient:
    """One DEALER socket that sends a command and returns the reply body's size, undecoded
    (clients refuse bodies over 16 MiB, which a master before issue 13 sent here)."""

    def __init__(self, url: str) -> None:
        self._context = zmq.Context()
        self._sock = self._context.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(url)
        self._next = 0

    def call(self, cmd: c.Command, timeout: float) -> int:
        """Bytes of the reply body to ``cmd``.

        Raises:
            RuntimeError: no reply within ``timeout`` seconds, or an error status.
        """
        self._next += 1
        msg_type, body = encode_command(cmd)
        self._sock.send_multipart(
            [Header(Kind.REQUEST, MsgType(msg_type), self._next).encode(), encode_body(body)]
        )
        if not self._sock.poll(int(timeout * 1000), zmq.POLLIN):
            raise RuntimeError(f"no reply to {type(cmd).__name__} within {timeout} s")
        frames = self._sock.recv_multipart(copy=False)
        got = Header.decode(frames[0].buffer)
        if got.status != 0 or got.request_id != self._next:
            raise RuntimeError(f"{type(cmd).__name__}: status {got.status}, request {got.request_id}")
        return len(frames[1].buffer)

    def close(self) -> None:
        self._sock.close()
        self._context.term()


def _timed(client: _RawClient, pid: int, cmd: c.Command, calls: int) -> dict[str, float | int]:
    """One call (cold), then ``calls`` more: reply bytes, master CPU and client wall time."""
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    size = client.call(cmd, 600)
    first_cpu, first_wall = cpu_seconds(pid) - cpu0, time.perf_counter() - t0
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for _ in range(calls):
        client.call(cmd, 600)
    n = max(1, calls)
    return {
        "bytes": size,
        "first_cpu_s": round(first_cpu, 3),
        "first_wall_s": round(first_wall, 3),
        "cpu_s": round((cpu_seconds(pid) - cpu0) / n, 4),
        "wall_s": round((time.perf_counter() - t0) / n, 4),
    }


def measure(maps: int, partitions: int, calls: int, python: str) -> dict[str, Any]:
    """Write the data, start the master on it, time the calls; see the module docstring."""
    with tempfile.TemporaryDirectory(prefix="croupier-locsize-") as tmp:
        data = Path(tmp) / "master"
        t0 = time.perf_counter()
        write_data_dir(data, maps, partitions)
        result: dict[str, Any] = {"maps": maps, "partitions": partitions, "calls": calls, "python": python}
        result["write_s"] = round(time.perf_counter() - t0, 1)
        cli = [python, "-m", "croupier.services.cli", "master", "--listen", "127.0.0.1:0"]
        args = [*cli, "--data-dir", str(data), "--grace", "600s", "--app-timeout", "3600s"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            t0 = time.perf_counter()
            url = proc.stdout.readline().decode().strip()
            with MasterClient(url, timeout=900, attempts=1) as client:
                summary = client.call(c.GetShuffle(APP, 0), timeout=900)
                result["load_s"] = round(time.perf_counter() - t0, 1)
                assert summary["mappers_ended"] == maps, summary["mappers_ended"]
            raw = _RawClient(url)
            try:
                every = tuple(range(partitions))
                for name, cmd in (
                    ("get_locations", c.GetLocations(APP, 0, 0)),
                    ("get_locations_batch", c.GetLocationsBatch(APP, 0, every)),
                    ("get_shuffle", c.GetShuffle(APP, 0)),
                ):
                    result[name] = _timed(raw, proc.pid, cmd, calls)
            finally:
                raw.close()
        finally:
            proc.terminate()
            proc.wait(timeout=120)
            if proc.stdout is not None:
                proc.stdout.close()
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the measurement as one JSON object."""
    parser = argparse.ArgumentParser(prog="croupier.tools.locations_size", description=__doc__)
    parser.add_argument("--maps", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(
        "--python",
        action="append",
        help="interpreter that runs the master (repeat it to compare checkouts; default: this one)",
    )
    args = parser.parse_args(argv)
    for python in args.python or [sys.executable]:
        print(json.dumps(measure(args.maps, args.partitions, args.calls, python)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
