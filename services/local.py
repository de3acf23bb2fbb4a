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
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Self

from croupier.core.codec import to_json
from croupier.core.commands import Status
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError
from croupier.core.replies import StatusReply
from croupier.services._lifecycle import Service
from croupier.services.master import MasterService
from croupier.services.worker import WorkerService
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient, CurveServer
from croupier.transports.master_client import MasterClient
from croupier.transports.secret import ClusterSecret, ensure_secret_file, secret_file_from_env

__all__ = ["LocalCluster"]

log = logging.getLogger(__name__)

CLI = [sys.executable, "-m", "croupier.services.cli"]


_HELD = {signal.SIGINT, signal.SIGTERM}


class _Child:
    """A ``croupier`` subprocess whose first stdout line is its URL or id; put in ``started``
    as soon as it runs, so that whoever stops ``started`` stops it, however start-up ends."""

    def __init__(self, args: list[str], log_path: Path, started: list[_Child]) -> None:
        self.args = args
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        main = threading.current_thread() is threading.main_thread()
        # SIGINT and SIGTERM (which ``croupier local`` turns into SystemExit during start-up) wait
        # until the child is held: raised inside Popen, they left it running, held by nobody.
        # The child unblocks them first thing (``croupier.services.cli.main``).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD) if main else None
        try:
            self.popen = subprocess.Popen(
                [*CLI, *args], stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
            )
            started.append(self)
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        assert self.popen.stdout is not None
        try:
            self.first_line = self.popen.stdout.readline().decode().strip()
        except BaseException:
            # interrupted (Ctrl-C) before the child said it is up: end it here
            self.kill()
            self.popen.stdout.close()
            self._log.close()
            raise
        if not self.first_line:
            self.stop()
            raise RuntimeError(f"croupier {' '.join(args)} failed to start; see {log_path}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen.poll() is None:
            # a paused (SIGSTOP) child would not act on SIGTERM until continued
            self.popen.send_signal(signal.SIGCONT)
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()


class LocalCluster(Service):
    """Parameters:
    workers: how many workers.
    base_dir: where data and logs go (a temporary directory by default, removed at stop).
    processes: run master and workers as subprocesses.
    master_config, worker_config: in-process settings.
    worker_args: extra CLI arguments for worker subprocesses.
    master_args: extra CLI arguments for master subprocesses (``--tenants FILE``, quotas).
    curve: every socket talks CURVE (``--curve``), with the key pair of ``secret_file``.
    secure: check every request against a cluster secret (PROTOCOL §2.1). Default: on for
        subprocesses (as ``croupier local`` runs them), off in-process (library tests).
    secret_file: the secret to use; default ``$CROUPIER_SECRET_FILE``, else ``<base_dir>/secret``
        (created). Every master and worker started here gets it (``--secret-file``).
    disks: data directories per worker (``<base_dir>/worker<i>/disk<d>``).
    http: in-process only: give the master and each worker an HTTP endpoint on a free port
        (``master.http.url``, ``workers[i].http.url``).
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
        master_args: list[str] | None = None,
        ha: bool = False,
        masters: int = 3,
        session_timeout: float = 2.0,
        curve: bool = False,
        secure: bool | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        disks: int = 1,
        http: bool = False,
    ) -> None:
        self.http = http  # in-process: an HTTP endpoint on a free port for the master and each worker
        self.num_workers = workers
        self.disks = disks
        self.ha = ha
        self.num_masters = masters if ha else 1
        self.session_timeout = session_timeout
        self.zookeeper: Any = None
        self.ha_masters: list[Any] = []
        self._master_procs: list[_Child] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if base_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="croupier-local-")
            base_dir = self._tmp.name
        self.base_dir = Path(base_dir)
        self.want_curve = curve
        self.curve: CurveServer | None = None
        self.processes = processes
        self.secure = processes if secure is None else secure
        given = secret_file_from_env(str(secret_file) if secret_file is not None else None)
        self.secret_file = Path(given) if given else self.base_dir / "secret"
        self.secret: ClusterSecret | None = None
        self.master_config = master_config or MasterConfig(takeover_grace=5.0, worker_timeout=30.0)
        self.worker_config = worker_config or WorkerConfig(heartbeat_interval=1.0)
        if self.master_config.object_store is None and self.worker_config.object_store is not None:
            # the master deletes the objects too, and sweeps orphans (issue 26)
            self.master_config = replace(self.master_config, object_store=self.worker_config.object_store)
        self._worker_args = worker_args or []
        self._master_args = master_args or []
        self.master: MasterService | None = None
        self.workers: list[WorkerService] = []
        self._master_proc: _Child | None = None
        self._worker_procs: list[_Child] = []
        self._started: list[_Child] = []  # every child process started, in order
        self.master_url = ""

    def start(self, timeout: float = 60.0) -> Self:
        try:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            if self.secure or self.want_curve:
                secret, _ = ensure_secret_file(self.secret_file)
                self.secret = secret if self.secure else None
                self.curve = CurveServer.from_secret(secret) if self.want_curve else None
            if self.ha:
                self._start_ha()
            elif self.processes:
                self._master_proc = _Child(
                    [
                        "master",
                        "--data-dir",
                        str(self.base_dir / "master"),
                        *self._master_flags(),
                        *self._secret_flags(),
                    ],
                    self.base_dir / "master.log",
                    self._started,
                )
                self.master_url = self._master_proc.first_line
                for i in range(self.num_workers):
                    self._worker_procs.append(self._spawn_worker(i))
            else:
                self.master = MasterService(
                    "tcp://127.0.0.1:0",
                    self.base_dir / "master",
                    config=self.master_config,
                    curve=self.curve,
                    secret=self.secret,
                    http="127.0.0.1:0" if self.http else None,
                ).start()
                self.master_url = self.master.url
                for i in range(self.num_workers):
                    self.workers.append(self._worker(i).start())
            self.wait_for_workers(self.num_workers, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _master_flags(self) -> list[str]:
        cfg = self.master_config
        return [
            "--listen",
            "127.0.0.1:0",
            "--worker-timeout",
            f"{cfg.worker_timeout}s",
            "--app-timeout",
            f"{cfg.app_timeout}s",
            "--grace",
            f"{cfg.takeover_grace}s",
            *(["--object-store", cfg.object_store] if cfg.object_store is not None else []),
            *(["--orphan-grace", f"{cfg.orphan_grace}s", "--orphan-interval", f"{cfg.orphan_interval}s"]),
            *self._master_args,
            *self._curve_flags(),
        ]

    def _curve_flags(self) -> list[str]:
        return ["--curve"] if self.curve is not None else []

    @property
    def curve_server_key(self) -> str:
        """The Z85 CURVE public key clients need (``ClientConfig.curve_server_key``); "" without CURVE."""
        return self.curve.public.decode() if self.curve is not None else ""

    def client_curve(self) -> CurveClient | None:
        """The CURVE options of a client of this cluster (None without CURVE)."""
        return self.curve.client() if self.curve is not None else None

    def _secret_flags(self) -> list[str]:
        needed = self.secret is not None or self.curve is not None
        return ["--secret-file", str(self.secret_file)] if needed else []

    def _start_ha(self) -> None:
        """A local ZooKeeper (from the system install), then the master ensemble, then workers."""
        from croupier.ha.zkserver import LocalZooKeeper

        self.zookeeper = LocalZooKeeper(self.base_dir / "zookeeper", nodes=1).start()
        self.master_url = self.zookeeper.url("/croupier")
        for i in range(self.num_masters):
            self._start_master(i)
        for i in range(self.num_workers):
            if self.processes:
                self._worker_procs.append(self._spawn_worker(i))
            else:
                self.workers.append(self._worker(i).start())

    def _start_master(self, i: int) -> None:
        cfg = self.master_config
        if self.processes:
            child = _Child(
                [
                    "master",
                    "--ha",
                    self.master_url,
                    "--session-timeout",
                    f"{self.session_timeout}s",
                    *self._master_flags(),
                    *self._secret_flags(),
                ],
                self.base_dir / f"master{i}.log",
                self._started,
            )
            if i < len(self._master_procs):
                self._master_procs[i] = child
            else:
                self._master_procs.append(child)
        else:
            from croupier.services.ha_master import HaMasterService

            member = HaMasterService(
                "tcp://127.0.0.1:0",
                self.master_url,
                config=cfg,
                session_timeout=self.session_timeout,
                curve=self.curve,
                secret=self.secret,
                http="127.0.0.1:0" if self.http else None,
            ).start()
            if i < len(self.ha_masters):
                self.ha_masters[i] = member
            else:
                self.ha_masters.append(member)

    def master_urls(self) -> list[str]:
        """The RPC URL of every master (HA mode)."""
        if self.processes:
            return [c.first_line for c in self._master_procs]
        return [m.url for m in self.ha_masters]

    def kill_master(self, i: int) -> None:
        """HA mode: SIGKILL master ``i`` (in-process: stop it abruptly)."""
        if self.processes:
            self._master_procs[i].kill()
            self._master_procs[i].stop()
        else:
            self.ha_masters[i].stop()

    def start_master(self, i: int) -> None:
        """HA mode: start master ``i`` again (after ``kill_master``), as a new member."""
        self._start_master(i)

    def master_running(self, i: int) -> bool:
        """HA mode: whether master subprocess ``i`` runs (not killed, or started again).

        Raises:
            RuntimeError: the cluster runs in-process.
        """
        if not self.processes:
            raise RuntimeError("only master subprocesses are watched (processes=True)")
        return self._master_procs[i].popen.poll() is None

    def worker_dirs(self, i: int) -> list[Path]:
        """The data directories of worker ``i`` (they outlive its restarts)."""
        return self._worker_dirs(i)

    def _worker_dirs(self, i: int) -> list[Path]:
        return [self.base_dir / f"worker{i}" / f"disk{d}" for d in range(self.disks)]

    def _worker(self, i: int) -> WorkerService:
        return WorkerService(
            self.master_url,
            self._worker_dirs(i),
            config=self.worker_config,
            curve=self.curve,
            secret=self.secret,
            http="127.0.0.1:0" if self.http else None,
        )

    def _spawn_worker(self, i: int) -> _Child:
        return _Child(self._worker_cli(i), self.base_dir / f"worker{i}.log", self._started)

    def _worker_cli(self, i: int) -> list[str]:
        """The ``croupier worker`` arguments of worker ``i``: every ``worker_config`` setting."""
        dirs = ",".join(str(d) for d in self._worker_dirs(i))
        return [
            "worker",
            "--master",
            self.master_url,
            "--dirs",
            dirs,
            *([] if (beat := self.worker_config.heartbeat_interval) is None else ["--heartbeat", f"{beat}s"]),
            "--memory",
            str(self.worker_config.memory_cap),
            *(["--fsync"] if self.worker_config.commit_fsync else []),
            *([] if self.worker_config.direct_io else ["--no-direct-io"]),
            "--partition-actors",
            str(self.worker_config.partition_actors),
            "--flush-threshold",
            str(self.worker_config.flush_threshold),
            "--chunk-size",
            str(self.worker_config.chunk_size),
            "--throttle-window",
            f"{self.worker_config.throttle_window}s",
            "--throttle-floor",
            str(self.worker_config.throttle_floor),
            "--throttle-z",
            str(self.worker_config.throttle_z),
            "--split-threshold",
            str(self.worker_config.split_threshold),
            "--memory-tier-max",
            str(self.worker_config.memory_tier_max),
            "--memory-tier-fraction",
            repr(self.worker_config.memory_tier_fraction),
            *(
                ["--object-store", self.worker_config.object_store]
                if self.worker_config.object_store is not None
                else []
            ),
            *(
                ["--disk-reserve", str(self.worker_config.disk_reserve)]
                if self.worker_config.disk_reserve is not None
                else []
            ),
            *self._curve_flags(),
            *self._secret_flags(),
            *self._worker_args,
        ]

    def status(self) -> dict[str, Any]:
        """The master's STATUS reply, as JSON values.

        Raises:
            CroupierError: the master could not be reached, or its reply is malformed.
        """
        return dict(to_json(self._status()))

    def _status(self) -> StatusReply:
        signer = Signer.member(self.secret)
        with MasterClient(
            self.master_url, timeout=10, attempts=3, curve=self.client_curve(), signer=signer
        ) as client:
            return client.request(Status(), StatusReply)

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` workers are registered and active."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(CroupierError):
                active = [w for w in self._status().workers if w.status == WorkerStatus.ACTIVE]
                if len(active) >= n:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{n} workers did not register within {timeout:.0f}s (logs in {self.base_dir})"
                )
            time.sleep(0.05)

    def worker_pids(self) -> list[int]:
        """Process ids of worker subprocesses (empty in-process)."""
        return [child.popen.pid for child in self._worker_procs]

    def worker_ids(self) -> list[str]:
        """The worker id of each worker, by index (ids persist in the worker's dirs across restarts)."""
        if self.processes:
            return [child.first_line for child in self._worker_procs]
        return [worker.worker_id for worker in self.workers]

    def worker_running(self, i: int) -> bool:
        """Whether worker subprocess ``i`` is alive (killed and not restarted: False).

        Raises:
            RuntimeError: the cluster runs in-process.
        """
        return self._worker_child(i).popen.poll() is None

    def pause_worker(self, i: int) -> None:
        """Freeze worker subprocess ``i`` (SIGSTOP): it holds its sockets but answers nothing.

        Raises:
            RuntimeError: the cluster runs in-process.
        """
        child = self._worker_child(i)
        if child.popen.poll() is None:
            child.popen.send_signal(signal.SIGSTOP)

    def resume_worker(self, i: int) -> None:
        """Let a paused worker subprocess ``i`` run again (SIGCONT).

        Raises:
            RuntimeError: the cluster runs in-process.
        """
        child = self._worker_child(i)
        if child.popen.poll() is None:
            child.popen.send_signal(signal.SIGCONT)

    def _worker_child(self, i: int) -> _Child:
        if not self.processes:
            raise RuntimeError("only worker subprocesses can be signalled (processes=True)")
        return self._worker_procs[i]

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
        for member in self.ha_masters:
            member.stop()
        for child in self._master_procs:
            child.stop()
        for child in self._started:  # any a signal kept from the lists above (idempotent)
            child.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


@contextlib.contextmanager
def embedded_cluster(workers: int) -> Iterator[str]:
    """A master and ``workers`` worker processes, stopped on exit; yields the master's URL.

    What ``croupier.engine.map_reduce`` starts when it is given no ``url``: the SDK finds it
    through the ``croupier.clusters`` entry point ``local`` (pyproject.toml), so that it never
    imports the services (DESIGN §3).
    """
    with LocalCluster(workers, processes=True) as cluster:
        yield cluster.master_url
