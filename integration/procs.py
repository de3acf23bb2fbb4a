"""Start and stop real Croupier processes for integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from croupier.core.config import MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from croupier.transports.auth import Signer
from croupier.transports.secret import load_secret_file

CLI = [sys.executable, "-m", "croupier.services.cli"]


class Proc:
    """A ``croupier`` subprocess whose first stdout line is its URL.

    Parameters:
        args: the CLI arguments after ``croupier``.
        log_path: stderr goes here (read it when a test fails).
    """

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline().decode().strip()
        if not line:
            self.stop()
            raise RuntimeError(f"croupier {' '.join(args)} printed no URL:\n{self.log()}")
        self.url = line

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time. Idempotent."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()
        return self.popen.returncode


def member_signer(secret_file: Path) -> Signer:
    """A member's signer from a secret file (a ``croupier master`` makes ``<data-dir>/secret``)."""
    return Signer(load_secret_file(secret_file).member_key)


def admin(url: str, *args: str, secret_file: Path, timeout: float = 30.0) -> Any:
    """Run ``croupier admin --master URL --secret-file FILE ... --json`` and parse its output."""
    out = subprocess.run(
        [*CLI, "admin", "--master", url, "--secret-file", str(secret_file), "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"croupier admin {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def wait_until(predicate: Any, timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def fault_cluster(workers: int, base: Path, **worker_settings: Any) -> LocalCluster:
    """A cluster of worker processes that notices a killed worker within seconds: the fault
    tests' cluster (worker timeout 3 s, heartbeats every 0.5 s, takeover grace 1 s).
    ``worker_settings`` are further ``WorkerConfig`` fields."""
    return LocalCluster(
        workers,
        base,
        processes=True,
        master_config=MasterConfig(worker_timeout=3.0, takeover_grace=1.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5, **worker_settings),
    )
