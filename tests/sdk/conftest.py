"""Fixtures for SDK tests: a fast client config and clusters (fake workers, or the real LocalCluster)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from croupier.core.config import ClientConfig
from tests.sdk.fakes import FakeCluster, fake_cluster


class HasMasterUrl(Protocol):
    @property
    def master_url(self) -> str: ...


FAST = ClientConfig(
    rpc_timeout=3.0,
    app_heartbeat_interval=0.2,
    push_buffer_size=512,
    push_merge_size=8 * 1024,
    max_in_flight_per_worker=4,
    commit_wait_timeout=30.0,
)


@pytest.fixture
def config() -> ClientConfig:
    return FAST


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with fake_cluster(workers=3) as cluster:
        yield cluster


HAVE_LOCAL = importlib.util.find_spec("croupier.services.local") is not None


@pytest.fixture(params=["fake", "local", "local-actor-per-location"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HasMasterUrl]:
    """Every end-to-end test runs against fake workers and against the real LocalCluster, whose
    workers shard their locations over a few actors (the default) or give each its own."""
    if request.param == "fake":
        with fake_cluster(workers=3) as fc:
            yield fc
        return
    if not HAVE_LOCAL:
        pytest.skip("croupier.services.local is not there yet")
    from croupier.core.config import WorkerConfig
    from croupier.services.local import LocalCluster  # type: ignore[import-not-found,unused-ignore]

    per_location = request.param == "local-actor-per-location"
    worker = WorkerConfig(heartbeat_interval=1.0, partition_actors=0 if per_location else 4)
    with LocalCluster(workers=3, base_dir=tmp_path, worker_config=worker) as lc:
        yield lc
