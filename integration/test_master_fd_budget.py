"""Issue 13: a master short of descriptors refuses new connections cleanly.

It used to accept until ``accept`` failed with EMFILE, which libzmq retries at once and forever:
new clients got no reply and the master burned a full core. Here a real master runs with
RLIMIT_NOFILE at 256 (soft and hard, so it cannot raise it), idle clients are opened past its
connection budget (256 - 64), and the master must go on serving the clients it has, refuse
the new one at once (the client sees the ZAP refusal, ERROR 400), not spin, and serve new
clients again once idle ones close.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from croupier.core.errors import RequestTimeout
from croupier.core.wire import MsgType
from croupier.transports.rpc import RpcClient
from integration.procs import Proc

pytestmark = pytest.mark.integration

LIMIT = 256
IDLE = 300  # past the budget (256 - 64 = 192) and past the limit itself


# The CLI with RLIMIT_NOFILE lowered first (soft and hard: the master cannot raise it back).
LOW_FD_CLI = [
    sys.executable,
    "-c",
    "import resource, runpy, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT})); "
    "sys.argv[0] = 'croupier'; "
    "runpy.run_module('croupier.services.cli', run_name='__main__')",
]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_share(pid: int, seconds: float = 2.0) -> float:
    before, start = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu_seconds(pid) - before) / (time.monotonic() - start)


class LowFdMaster(Proc):
    def __init__(self, tmp_path: Path) -> None:
        args = ["master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
        self.args = args
        self.log_path = tmp_path / "master.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [*LOW_FD_CLI, *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
        )
        assert self.popen.stdout is not None
        self.url = self.popen.stdout.readline().decode().strip()
        assert self.url, self.log()


@pytest.fixture
def master(tmp_path: Path) -> Iterator[LowFdMaster]:
    proc = LowFdMaster(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


def _handshake(
    ctx: zmq.Context[zmq.Socket[bytes]], url: str, timeout: float = 5.0
) -> tuple[zmq.Socket[bytes], int]:
    """Connect a fresh DEALER and wait for the end of its handshake.

    Returns the socket and the monitor event that ended the handshake: ``EVENT_HANDSHAKE_SUCCEEDED``,
    ``EVENT_HANDSHAKE_FAILED_AUTH`` (the master refused it) or 0 (no answer within ``timeout``).
    """
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        sock.connect(url)
        if monitor.poll(int(timeout * 1000)):
            event = recv_monitor_message(monitor)
            return sock, int(event["event"])
        return sock, 0
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)


def test_a_master_short_of_descriptors_refuses_new_clients_and_serves_the_others(
    master: LowFdMaster,
) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    idle: list[zmq.Socket[bytes]] = []
    try:
        with RpcClient(master.url, context=ctx, timeout=5.0, retries=0) as existing:
            existing.call(MsgType.PING)
            # Idle clients one by one until the master refuses one (it used to run out of
            # descriptors near 256 instead, and then answer no handshake at all).
            event = 0
            while len(idle) < IDLE:
                sock, event = _handshake(ctx, master.url)
                idle.append(sock)
                if event != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    break
            assert event == zmq.EVENT_HANDSHAKE_FAILED_AUTH, (len(idle), master.log()[-3000:])
            assert existing.call(MsgType.PING).body is not None
            with (
                RpcClient(master.url, context=ctx, timeout=1.0, retries=0) as new,
                pytest.raises(RequestTimeout),
            ):
                new.call(MsgType.PING)
            share = _cpu_share(master.popen.pid)
            assert share < 0.5, f"the master uses {share:.0%} of a core while idle"
            assert existing.call(MsgType.PING).body is not None
            for sock in idle:
                sock.close(linger=0)
            idle.clear()
            time.sleep(1.0)
            with RpcClient(master.url, context=ctx, timeout=5.0, retries=2) as new:
                assert new.call(MsgType.PING).body is not None
        assert master.popen.poll() is None
        assert "connection budget" in master.log()
    finally:
        for sock in idle:
            sock.close(linger=0)
        ctx.term()
