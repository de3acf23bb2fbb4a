"""Issue 13: a real master under a pids limit (cgroup v1 ``pids`` controller).

Each live app has an actor, which is a thread. Where no thread can start, ``RuntimeError:
can't start new thread`` used to end the master actor: the process stayed up and never
answered again, even after a restart under the same limit. Here the master runs in a pids
cgroup whose ``pids.max`` leaves room for a few app threads: the registrations past it get a
retriable ``UNAVAILABLE`` while ``PING``, ``STATUS`` and the apps it has keep being served;
a restart with more apps in its log than threads allowed serves or exits non-zero with the
reason, within a bounded time, and never hangs.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core import commands as c
from croupier.core.errors import Unavailable
from croupier.transports.master_client import MasterClient
from integration.procs import member_signer

pytestmark = pytest.mark.integration

PIDS_ROOT = Path("/sys/fs/cgroup/pids")
APP_THREADS = 4  # threads left for app actors above the master's own
RESTART_WAIT_S = 60.0

# The CLI, moved into the cgroup named by its first argument before it starts anything.
IN_CGROUP_CLI = [
    sys.executable,
    "-c",
    "import os, runpy, sys; "
    "open(sys.argv.pop(1) + '/cgroup.procs', 'w').write(str(os.getpid())); "
    "sys.argv[0] = 'croupier'; "
    "runpy.run_module('croupier.services.cli', run_name='__main__')",
]


def _why_not() -> str:
    if os.geteuid() != 0:
        return "needs root to create a cgroup"
    if not (PIDS_ROOT / "pids.max").exists() and not (PIDS_ROOT / "cgroup.procs").exists():
        return f"no cgroup v1 pids controller at {PIDS_ROOT}"
    if not os.access(PIDS_ROOT, os.W_OK):
        return f"{PIDS_ROOT} is not writable"
    return ""


@pytest.fixture
def cgroup() -> Iterator[Path]:
    if reason := _why_not():
        pytest.skip(reason)
    path = PIDS_ROOT / f"croupier-test-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a pids cgroup: {exc}")
    try:
        yield path
    finally:
        deadline = time.monotonic() + 10
        while (path / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        path.rmdir()


def _start(cgroup: Path, data: Path, log: Path) -> subprocess.Popen[bytes]:
    args = [*IN_CGROUP_CLI, str(cgroup), "master", "--listen", "127.0.0.1:0", "--data-dir", str(data)]
    with open(log, "ab") as err:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()


def _register_until_refused(client: MasterClient) -> tuple[list[str], Unavailable]:
    apps: list[str] = []
    for i in range(APP_THREADS + 10):
        try:
            apps.append(client.call(c.RegisterApp(f"app{i}"))["app_id"])
        except Unavailable as exc:
            return apps, exc
    raise AssertionError(f"{len(apps)} apps registered under a limit of {APP_THREADS} threads")


def test_a_master_under_a_pids_limit_refuses_apps_and_serves_the_rest(cgroup: Path, tmp_path: Path) -> None:
    log = tmp_path / "master.log"
    proc = _start(cgroup, tmp_path / "data", log)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url, log.read_text()
        own = int((cgroup / "pids.current").read_text())
        limit = own + APP_THREADS
        (cgroup / "pids.max").write_text(str(limit))
        # the master made <data-dir>/secret; STATUS lists apps only to a member (issue 14)
        signer = member_signer(tmp_path / "data" / "secret")
        with MasterClient(url, attempts=1, timeout=10.0, signer=signer) as client:
            apps, refused = _register_until_refused(client)
            assert apps, "not even one app could register"
            assert refused.code == "UNAVAILABLE" and refused.retriable
            assert "cannot start the actor" in refused.message
            with pytest.raises(Unavailable):  # still refused, still answered
                client.call(c.RegisterApp("later"))
            assert client.call(c.Ping())["pong"] is True
            status = client.call(c.Status())
            assert sorted(a["app_id"] for a in status["apps"]) == sorted(apps)
            client.call(c.AppHeartbeat(apps[0]))  # the apps it has are served
            client.call(c.UnregisterApp(apps[-1]))  # a thread is freed: one more app fits
            apps[-1] = client.call(c.RegisterApp("again"))["app_id"]
        assert proc.poll() is None
    finally:
        _stop(proc)
    # More apps in the log than the threads now allowed: serve, or exit non-zero with the reason.
    (cgroup / "pids.max").write_text(str(limit - APP_THREADS // 2))
    log = tmp_path / "restart.log"
    proc = _start(cgroup, tmp_path / "data", log)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], RESTART_WAIT_S)
        assert ready, f"the restarted master neither printed its URL nor exited: {log.read_text()[-2000:]}"
        line = proc.stdout.readline().decode().strip()  # "" at EOF: it exited
        if line:
            with MasterClient(line, attempts=1, timeout=10.0) as client:
                assert client.call(c.Ping())["pong"] is True
        else:
            assert proc.wait(RESTART_WAIT_S) != 0
            assert "can't start new thread" in log.read_text(), log.read_text()[-2000:]
    finally:
        _stop(proc)
