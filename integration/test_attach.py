"""Apps that outlive their driver (issue 16 item 4): ``App.handle()`` and ``Client.attach``.

A driver process registers an app and a shuffle, ends some maps, pushes part of one more,
and is killed with SIGKILL. A new process attaches with the app's handle, heartbeats it past
the master's ``--app-timeout``, finishes the maps that had not ended with new attempts, and
reads every record exactly once. A wrong key is refused (``Unauthorized``); an app that
expired is gone (``UnknownApp``).

The cluster (master and workers) runs in this process with a cluster secret; the driver
and the attaching process are real child processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.services.local import LocalCluster

pytestmark = pytest.mark.integration

APP_TIMEOUT = 3.0
MAPS = 6
PARTITIONS = 4
RECORDS = 300  # per map, ~1 KiB each: the half-written map pushes some batches before it dies

DRIVER = """
import sys, time, croupier
from croupier.core.config import ClientConfig
url, maps, parts, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
client = croupier.connect(url, config=ClientConfig(app_heartbeat_interval=0.5))
app = client.register_app("driver")
sh = app.register_shuffle(num_mappers=maps, num_partitions=parts)
print("handle", app.handle(), sh.shuffle_id, flush=True)
def record(m, i):
    return b"%d-%d-" % (m, i) + b"x" * 1000
for m in range(maps // 2):
    with sh.writer(m) as w:
        for i in range(records):
            w.write(i % parts, record(m, i))
    print("ended", m, flush=True)
w = sh.writer(maps // 2)  # in flight when the driver dies: pushed in part, never ended
for i in range(records):
    w.write(i % parts, record(maps // 2, i))
print("stuck", flush=True)
time.sleep(600)
"""

ATTACH = """
import os, sys, time, croupier
from croupier.core.config import ClientConfig
url, shuffle_id, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ended = {int(m) for m in sys.argv[4].split(",") if m}
with croupier.connect(url, config=ClientConfig(app_heartbeat_interval=0.5)) as client:
    app = client.attach(os.environ["CROUPIER_APP_HANDLE"])
    time.sleep(wait)  # longer than --app-timeout: this process's heartbeats keep the app
    sh = app.open_shuffle(shuffle_id)
    for m in range(sh.num_mappers):
        if m in ended:
            continue
        with sh.writer(m, attempt_id=1) as w:
            for i in range(int(sys.argv[5])):
                w.write(i % sh.num_partitions, b"%d-%d-" % (m, i) + b"x" * 1000)
    for p in range(sh.num_partitions):
        for record in sh.reader(p, timeout=60):
            print(p, record[: record.rindex(b"-")].decode())
    app.unregister()
print("unregistered", app.heartbeats)
"""

TRY_ATTACH = """
import os, sys, croupier
try:
    croupier.connect(sys.argv[1]).attach(os.environ["CROUPIER_APP_HANDLE"])
except croupier.CroupierError as exc:
    print(type(exc).__name__, exc.code)
    print(exc)
else:
    print("ATTACHED")
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        2,
        tmp_path / "cluster",
        secure=True,
        master_config=MasterConfig(app_timeout=APP_TIMEOUT, sweep_interval=0.2, takeover_grace=0.0),
        worker_config=WorkerConfig(heartbeat_interval=0.5),
    ) as cl:
        yield cl


class _Driver:
    """The driver child: its stdout lines, read as they come."""

    def __init__(self, url: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", DRIVER, url, str(MAPS), str(PARTITIONS), str(RECORDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ended: list[int] = []

    def expect(self, word: str) -> list[str]:
        assert self.popen.stdout is not None
        while True:
            line = self.popen.stdout.readline()
            if not line:
                assert self.popen.stderr is not None
                pytest.fail(f"the driver exited before {word!r}: {self.popen.stderr.read()}")
            fields = line.split()
            if fields[0] == "ended":
                self.ended.append(int(fields[1]))
            if fields[0] == word:
                return fields[1:]

    def kill9(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()


def _run(code: str, *args: str, handle: str, timeout: float = 120) -> str:
    env = {**os.environ, "CROUPIER_APP_HANDLE": handle}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_new_process_attaches_after_kill_9_and_finishes_the_shuffle(cluster: LocalCluster) -> None:
    driver = _Driver(cluster.master_url)
    try:
        handle, shuffle_id = driver.expect("handle")
        driver.expect("stuck")
    finally:
        driver.kill9()
    assert driver.popen.returncode == -signal.SIGKILL
    assert driver.ended == list(range(MAPS // 2))
    killed_at = time.monotonic()
    ended = ",".join(map(str, driver.ended))
    # it attaches within --app-timeout, then outlives two more of them on its own heartbeats
    out = _run(
        ATTACH, cluster.master_url, shuffle_id, str(2 * APP_TIMEOUT), ended, str(RECORDS), handle=handle
    )
    assert time.monotonic() - killed_at > 2 * APP_TIMEOUT
    lines = out.splitlines()
    assert lines[-1].startswith("unregistered")
    assert int(lines[-1].split()[1]) >= 2  # the attached process heartbeated the app
    seen = Counter(line.split()[1] for line in lines[:-1])
    expected = {f"{m}-{i}" for m in range(MAPS) for i in range(RECORDS)}
    assert set(seen) == expected  # the half-written attempt 0 of map MAPS//2 is dropped
    assert set(seen.values()) == {1}  # every record exactly once
    for line in lines[:-1]:
        partition, name = line.split()
        assert int(partition) == int(name.split("-")[1]) % PARTITIONS


def test_attaching_with_a_wrong_key_is_unauthorized(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url, config=ClientConfig(app_heartbeat_interval=0.5)) as client:
        app = client.register_app("owner")
        prefix, app_id, key = app.handle().split(":")
        wrong = f"{prefix}:{app_id}:{'0' * len(key)}"
        keyless = f"{prefix}:{app_id}:"
        for handle in (wrong, keyless):
            first, *message = _run(TRY_ATTACH, cluster.master_url, handle=handle).splitlines()
            assert first == "Unauthorized UNAUTHORIZED"
            assert "refused the handle's key" in "\n".join(message)
            assert key not in "\n".join(message)
        # a wrong handle tried in this very process does not disturb the app's own key
        with pytest.raises(croupier.Unauthorized):
            client.attach(wrong)
        sh = app.register_shuffle(1, 1)
        with sh.writer(0) as w:
            w.write(0, b"still signed with the right key")
        assert list(sh.reader(0, timeout=30)) == [b"still signed with the right key"]
        app.unregister()


def test_attaching_after_the_app_expired_is_unknown_app(cluster: LocalCluster) -> None:
    driver = _Driver(cluster.master_url)
    try:
        handle, _ = driver.expect("handle")
    finally:
        driver.kill9()
    time.sleep(2 * APP_TIMEOUT)  # no heartbeat since the kill: the master expires the app
    first, *message = _run(TRY_ATTACH, cluster.master_url, handle=handle).splitlines()
    assert first == "UnknownApp UNKNOWN_APP"
    assert "expired" in "\n".join(message)
