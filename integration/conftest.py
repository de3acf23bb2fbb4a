"""Fixtures shared by the integration suites: a local cluster of real processes, a bucket."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from croupier.core.config import MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster
from croupier.transports.objstore import ObjectStore, open_object_store


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


@pytest.fixture
def bucket(seaweed: Any) -> Iterator[tuple[str, ObjectStore]]:
    """A new bucket of the session's SeaweedFS: its ``s3://`` URL and an open store on it."""
    url = seaweed.new_bucket_url()
    store = open_object_store(url)
    try:
        yield url, store
    finally:
        store.close()
