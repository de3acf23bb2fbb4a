"""Worker RSS against ``--memory`` with many locations (issue 13: per-location state is counted).

Usage::

    python -m croupier.tools.location_rss --locations 300000 --memory 256MiB [--before COMMIT]

Starts a ``croupier master`` and one ``croupier worker --memory CAP`` as subprocesses
(their data in a temporary directory), registers unreplicated shuffles of
``--per-shuffle`` partitions until they hold ``--locations`` partitions in all (every one
placed on that worker), and pushes one seal to each partition, ``--per-push`` seals per
PUSH. A PUSH answered ``CONGESTED`` is not retried: its locations count as refused. It
then prints the worker's RSS (``VmRSS`` of ``/proc/PID/status``) before and after, the
limiter's count (``memory_used`` of ``WORKER_INFO``), the worker's live locations and
the RSS each accepted location added.

``--before COMMIT`` runs the same measurement first with the servers' code of that
commit of the repository the current directory is in (``git archive``, laid out as
``pyproject.toml``'s package dirs say, first on ``PYTHONPATH``), then with this code, and
prints both rows. ``--base-locations`` lowers the count for that run when the older code
is too slow.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from croupier.core.batch import FLAG_SEAL, BatchHeader
from croupier.core.commands import RegisterApp, RegisterShuffle
from croupier.core.config import parse_size
from croupier.core.errors import Congested, CroupierError
from croupier.core.wire import MsgType
from croupier.transports.auth import Signer
from croupier.transports.digest import batch_digest
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from croupier.transports.secret import create_secret_file

__all__ = ["Row", "main", "measure"]


@dataclass(frozen=True, slots=True)
class Row:
    """One measurement: what was asked, what the worker took, and what it cost."""

    code: str
    cap: int
    locations: int
    accepted: int
    refused: int
    rss_before: int
    rss_after: int
    memory_used: int
    live_locations: int
    seconds: float

    @property
    def per_location(self) -> float:
        return (self.rss_after - self.rss_before) / self.accepted if self.accepted else 0.0


def _rss(pid: int) -> int:
    """``VmRSS`` of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _spawn(args: list[str], code: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH", "")) if p)
    cli = [sys.executable, "-m", "croupier.services.cli", "--log-level", "WARNING", *args]
    return subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)


def _checkout(commit: str, into: Path) -> str:
    """Lay out ``commit``'s packages under ``into``; returns the directory to put on ``PYTHONPATH``."""
    raw = subprocess.run(["git", "archive", commit], check=True, capture_output=True).stdout
    src = into / "src"
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(src, filter="data")
    dirs = tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(dirs.items()):  # "croupier" before "croupier.x"
        target = into / "pkg" / package.replace(".", "/")
        if package == "croupier":
            shutil.copytree(src / folder, target)
        else:
            target.symlink_to(src / folder, target_is_directory=True)
    return str(into / "pkg")


def _seal_frames(n: int, key: bytes | None) -> list[bytes]:
    """A PUSH's payload for ``n`` seals of map 0, attempt 0 (count 0), one per partition."""
    digest = batch_digest(0, 0, 0, FLAG_SEAL, b"", key)
    header = BatchHeader(0, 0, 0, 0, FLAG_SEAL, digest).encode()
    return [header * n, *([b""] * n)]


def _register(master: MasterClient, partitions: int, shuffle_id: int) -> dict[str, Any]:
    """Register one unreplicated shuffle, waiting for the worker to have registered."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return master.call(RegisterShuffle("rss", 1, partitions, replicate=False, shuffle_id=shuffle_id))
        except CroupierError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _push_all(push: RpcClient, reply: dict[str, Any], per_push: int, key: bytes | None) -> tuple[int, int]:
    """Seal every partition of a registered shuffle; ``(accepted, refused)`` locations."""
    address = next(iter(reply["workers"].values()))
    accepted = refused = 0
    n = reply["num_partitions"]
    for lo in range(0, n, per_push):
        parts = range(lo, min(n, lo + per_push))
        body = {
            "app_id": "rss",
            "shuffle_id": reply["shuffle_id"],
            "incarnation": address["incarnation"],
            "batches": [[p, 0] for p in parts],
            "replica": None,
        }
        try:
            push.call(MsgType.PUSH, body, _seal_frames(len(parts), key), timeout=60, retries=0)
            accepted += len(parts)
        except Congested:
            refused += len(parts)
    return accepted, refused


def measure(locations: int, cap: int, *, code: str | None, per_shuffle: int, per_push: int) -> Row:
    """Run one master and worker with ``code`` (None: this code) and seal ``locations`` partitions."""
    with tempfile.TemporaryDirectory() as tmp:
        # servers with a cluster secret (this code, or a commit that has one) need signed requests
        secure = code is None or Path(code, "croupier", "transports", "secret.py").exists()
        secret = create_secret_file(f"{tmp}/secret") if secure else None
        flags = ["--secret-file", f"{tmp}/secret"] if secure else []
        signer = Signer.member(secret)
        master_proc = _spawn(
            ["master", "--listen", "127.0.0.1:0", "--data-dir", f"{tmp}/m", "--app-timeout", "1h", *flags],
            code,
        )
        procs = [master_proc]
        try:
            assert master_proc.stdout is not None
            url = master_proc.stdout.readline().decode().strip()
            worker_args = ["worker", "--master", url, "--dirs", f"{tmp}/w", "--memory", str(cap), *flags]
            worker = _spawn([*worker_args, "--slots", str(2 * locations + 10), "--heartbeat", "1s"], code)
            procs.append(worker)
            with MasterClient(url, timeout=60, attempts=1, signer=signer) as master:
                registered = master.call(RegisterApp("rss", app_id="rss"))
                key = bytes.fromhex(registered["app_key"]) if secret is not None else None  # §2.1
                first = _register(master, min(locations, per_shuffle), 0)
                time.sleep(1.0)
                rss_before = _rss(worker.pid)
                start = time.monotonic()
                accepted = refused = 0
                reply, done, sid = first, 0, 0
                address = next(iter(first["workers"].values()))
                push_url = f"tcp://{address['host']}:{address['push_port']}"
                control_url = f"tcp://{address['host']}:{address['control_port']}"
                with RpcClient(push_url, timeout=60, retries=0, signer=signer) as push:
                    while True:
                        a, r = _push_all(push, reply, per_push, key)
                        accepted, refused, done, sid = accepted + a, refused + r, done + a + r, sid + 1
                        if done >= locations:
                            break
                        reply = _register(master, min(locations - done, per_shuffle), sid)
                seconds = time.monotonic() - start
                time.sleep(1.0)
                with RpcClient(control_url, timeout=30, retries=0, signer=signer) as control:
                    info = control.call(MsgType.WORKER_INFO).body
                return Row(
                    "before" if code is not None else "after",
                    cap,
                    locations,
                    accepted,
                    refused,
                    rss_before,
                    _rss(worker.pid),
                    info["memory_used"],
                    info["live_locations"],
                    seconds,
                )
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(timeout=60)
                if proc.stdout is not None:
                    proc.stdout.close()


def _print(row: Row) -> None:
    mib = 1024 * 1024
    print(
        f"{row.code:6s} {row.cap / mib:7.0f} {row.locations:9d} {row.accepted:9d} {row.refused:8d}"
        f" {row.rss_before / mib:8.1f} {row.rss_after / mib:8.1f} {(row.rss_after - row.cap) / mib:+10.1f}"
        f" {row.memory_used / mib:9.1f} {row.live_locations:8d} {row.per_location:8.0f} {row.seconds:6.1f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Print one row per run (``--before``'s first)."""
    p = argparse.ArgumentParser(prog="python -m croupier.tools.location_rss", description=__doc__)
    p.add_argument("--locations", type=int, default=300_000)
    p.add_argument("--memory", default="256MiB", help="the worker's --memory")
    p.add_argument("--per-shuffle", type=int, default=100_000, help="partitions per shuffle")
    p.add_argument("--per-push", type=int, default=1000, help="seals per PUSH")
    p.add_argument("--before", metavar="COMMIT", help="first run the servers of this git commit")
    p.add_argument("--base-locations", type=int, help="--locations for the --before run")
    args = p.parse_args(argv)
    cap = parse_size(args.memory)
    print(
        "code   cap_mib locations  accepted  refused  rss0_mib rss_mib  rss-cap_mib"
        " used_mib     live  B/locat  secs"
    )
    if args.before:
        n = args.base_locations or args.locations
        with tempfile.TemporaryDirectory() as tmp:
            code = _checkout(args.before, Path(tmp))
            _print(measure(n, cap, code=code, per_shuffle=args.per_shuffle, per_push=args.per_push))
    _print(measure(args.locations, cap, code=None, per_shuffle=args.per_shuffle, per_push=args.per_push))
    return 0


if __name__ == "__main__":
    sys.exit(main())
