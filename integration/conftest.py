"""Fixtures shared by the integration suites: a local cluster of real processes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core.config import MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster


@contextlib.contextmanager
def local_cluster(tmp_path: Path, *, worker_timeout: float = 3.0) -> Iterator[LocalCluster]:
    """A master and 3 workers as child processes, with fast liveness (a worker silent for
    ``worker_timeout`` seconds is lost; heartbeats every 0.5 s; 1 s of grace at start)."""
    with LocalCluster(
        3,
        tmp_path / "cluster",
        processes=True,
        master_config=MasterConfig(worker_timeout=worker_timeout, takeover_grace=1.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5),
    ) as cl:
        yield cl


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path) as cl:
        yield cl
