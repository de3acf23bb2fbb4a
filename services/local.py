"""A local cluster: one master and N workers, in this process or as child processes.

In-process (``processes=False``) is for tests: everything is real (sockets, files,
actors), only the process boundary is missing, and ``kill_worker`` stops a worker
abruptly (its memory is gone, its files stay). With ``processes=True`` each part is
a ``croupier master`` / ``croupier worker`` subprocess, as ``croupier local`` and
``croupier demo`` run them; ``kill_worker`` then sends SIGKILL.

Usage::

    with LocalCluster(workers=3, base_dir=tmp) as cluster:
        client = croupier.connect(cluster.master_url)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from croupier.core.commands import Status
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.core.errors import CroupierError
from croupier.services.master import MasterService
from croupier.services.worker import WorkerService
from croupier.transports.master_client import MasterClient

__all__ = ["LocalCluster"]

log = logging.getLogger(__name__)

CLI = [sys.executable, "-m", "croupier.services.cli"]


class _Child:
    """A ``croupier`` subprocess whose first stdout line is its URL or id."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
        )
        assert self.popen.stdout is not None
        self.first_line = self.popen.stdout.readline().decode().strip()
        if not self.first_line:
            self.stop()
            raise RuntimeError(f"croupier {' '.join(args)} failed to start; see {log_path}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()


class LocalCluster:
    """Parameters:
    workers: how many workers.
    base_dir: where data and logs go (a temporary directory by default, removed at stop).
    processes: run master and workers as subprocesses.
    master_config, worker_config: in-process settings.
    worker_args: extra CLI arguments for worker subprocesses.
    """

    def __init__(
        self,
        workers: int = 3,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        processes: bool = False,
        master_config: MasterConfig | None = None,
        worker_config: WorkerConfig | None = None,
        worker_args: list[str] | None = None,
    ) -> None:
        self.num_workers = workers
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if base_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="croupier-local-")
            base_dir = self._tmp.name
        self.base_dir = Path(base_dir)
        self.processes = processes
        self.master_config = master_config or MasterConfig(takeover_grace=5.0, worker_timeout=30.0)
        self.worker_config = worker_config or WorkerConfig(heartbeat_interval=1.0)
        self._worker_args = worker_args or []
        self.master: MasterService | None = None
        self.workers: list[WorkerService] = []
        self._master_proc: _Child | None = None
        self._worker_procs: list[_Child] = []
        self.master_url = ""

    def start(self, timeout: float = 60.0) -> Self:
        try:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            if self.processes:
                cfg = self.master_config
                self._master_proc = _Child(
                    [
                        "master",
                        "--listen",
                        "127.0.0.1:0",
                        "--data-dir",
                        str(self.base_dir / "master"),
                        "--worker-timeout",
                        f"{cfg.worker_timeout}s",
                        "--app-timeout",
                        f"{cfg.app_timeout}s",
                        "--grace",
                        f"{cfg.takeover_grace}s",
                    ],
                    self.base_dir / "master.log",
                )
                self.master_url = self._master_proc.first_line
                for i in range(self.num_workers):
                    self._worker_procs.append(self._spawn_worker(i))
            else:
                self.master = MasterService(
                    "tcp://127.0.0.1:0", self.base_dir / "master", config=self.master_config
                ).start()
                self.master_url = self.master.url
                for i in range(self.num_workers):
                    self.workers.append(self._worker(i).start())
            self.wait_for_workers(self.num_workers, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _worker_dirs(self, i: int) -> list[Path]:
        return [self.base_dir / f"worker{i}" / "disk0"]

    def _worker(self, i: int) -> WorkerService:
        return WorkerService(self.master_url, self._worker_dirs(i), config=self.worker_config)

    def _spawn_worker(self, i: int) -> _Child:
        dirs = ",".join(str(d) for d in self._worker_dirs(i))
        return _Child(
            [
                "worker",
                "--master",
                self.master_url,
                "--dirs",
                dirs,
                "--heartbeat",
                f"{self.worker_config.heartbeat_interval}s",
                "--memory",
                str(self.worker_config.memory_cap),
                *self._worker_args,
            ],
            self.base_dir / f"worker{i}.log",
        )

    def status(self) -> dict[str, Any]:
        with MasterClient(self.master_url, timeout=10, attempts=3) as client:
            return client.call(Status())

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` workers are registered and active."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(CroupierError):
                active = [w for w in self.status()["workers"] if w["status"] == "active"]
                if len(active) >= n:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{n} workers did not register within {timeout:.0f}s (logs in {self.base_dir})"
                )
            time.sleep(0.05)

    def kill_worker(self, i: int) -> str:
        """Stop worker ``i`` abruptly (SIGKILL for subprocesses); returns its worker id."""
        if self.processes:
            wid = self._worker_procs[i].first_line
            self._worker_procs[i].kill()
            return wid
        worker = self.workers[i]
        worker.stop()
        return worker.worker_id

    def restart_worker(self, i: int) -> None:
        """Start worker ``i`` again on the same directories (a new incarnation)."""
        if self.processes:
            self._worker_procs[i].stop()
            self._worker_procs[i] = self._spawn_worker(i)
        else:
            self.workers[i].stop()
            self.workers[i] = self._worker(i).start()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        for child in self._worker_procs:
            child.stop()
        if self.master is not None:
            self.master.stop()
        if self._master_proc is not None:
            self._master_proc.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
