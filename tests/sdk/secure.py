"""An in-process cluster with a cluster secret: the real master and real workers, all
given the same ``ClusterSecret`` (``LocalCluster`` does not take one here)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from croupier.core.commands import Status
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.core.enums import WorkerStatus
from croupier.core.replies import StatusReply
from croupier.services.master import MasterService
from croupier.services.worker import WorkerService
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.secret import ClusterSecret

SECRET = ClusterSecret(bytes(range(32)))


@dataclass
class SecureCluster:
    master: MasterService
    workers: list[WorkerService]
    secret: ClusterSecret | None

    @property
    def master_url(self) -> str:
        return self.master.url


def _wait_for_workers(url: str, n: int, secret: ClusterSecret | None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with MasterClient(url, timeout=5, attempts=3, signer=Signer.member(secret)) as client:
        while True:
            workers = client.request(Status(), StatusReply).workers
            if sum(w.status == WorkerStatus.ACTIVE for w in workers) >= n:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n} workers did not register within {timeout:.0f}s")
            time.sleep(0.05)


@contextlib.contextmanager
def secure_cluster(
    base: Path, *, workers: int = 2, secret: ClusterSecret | None = SECRET
) -> Iterator[SecureCluster]:
    """A master (its log in ``base/master``) and ``workers`` workers (``base/worker<i>``)."""
    master = MasterService(
        "tcp://127.0.0.1:0", base / "master", config=MasterConfig(takeover_grace=0.0), secret=secret
    ).start()
    started: list[WorkerService] = []
    try:
        for i in range(workers):
            # the forgery tests edit committed files: no memory tier to serve them from memory
            config = WorkerConfig(heartbeat_interval=0.5, memory_tier_max=0)
            worker = WorkerService(master.url, [base / f"worker{i}"], config=config, secret=secret)
            started.append(worker.start())
        _wait_for_workers(master.url, workers, secret)
        yield SecureCluster(master, started, secret)
    finally:
        for worker in started:
            worker.stop()
        master.stop()
