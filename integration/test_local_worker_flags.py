"""Issue 22 §3.11: ``croupier local`` takes the worker flags (memory tier, split threshold,
disk reserve, memory, ...) and the ``CROUPIER_WORKER_*`` variables reach its workers. Before,
``croupier local --split-threshold ...`` was refused as an unknown flag, and every worker it
started got every setting on its command line, so ``CROUPIER_WORKER_*`` was overridden."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from croupier.core.commands import Status
from croupier.core.replies import StatusReply
from croupier.core.wire import MsgType
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from integration.procs import CLI, Proc, member_signer, wait_until

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def _worker_cmdlines(pid: int) -> list[list[str]]:
    """The command lines of ``pid``'s child processes that are croupier workers."""
    lines = [Path(f"/proc/{c}/cmdline").read_bytes().decode().split("\0") for c in _children(pid)]
    return [line for line in lines if "worker" in line]


def _stop(local: Proc, children: list[int]) -> None:
    """Stop ``croupier local``, then any child it left (a SIGTERM that came before its handler)."""
    local.stop()
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)
    wait_until(lambda: not any(_alive(c) for c in children), timeout=60)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _flag(cmdline: list[str], flag: str) -> str:
    return cmdline[cmdline.index(flag) + 1]


def test_croupier_local_gives_its_workers_the_worker_flags_and_environment(tmp_path: Path) -> None:
    data = tmp_path / "local"
    env = {"CROUPIER_WORKER_DISK_RESERVE": "3MiB", "CROUPIER_WORKER_MEMORY": "300MiB"}
    flags = ["--split-threshold", "64KiB", "--memory-tier-max", "0", "--chunk-size", "1MiB"]
    local = Proc(["local", "--workers", "2", "--data-dir", str(data), *flags], tmp_path / "local.log", env)
    children = _children(local.popen.pid)
    try:
        signer = member_signer(data / "secret")
        with MasterClient(local.url, timeout=10, signer=signer) as master:

            def reported() -> StatusReply | None:
                status = master.request(Status(), StatusReply)
                dirs = (status.master.worker_dirs if status.master is not None else None) or {}
                return status if len(status.workers) == 2 and len(dirs) == 2 else None

            status = wait_until(reported, timeout=60, interval=0.5)
        assert status.master is not None and status.master.worker_dirs is not None
        for dirs in status.master.worker_dirs.values():
            assert [reserve for _, _, _, reserve, _ in dirs] == [3 * 2**20]  # $CROUPIER_WORKER_DISK_RESERVE
        for worker in status.workers:
            control = f"tcp://{worker.host}:{worker.control_port}"
            with RpcClient(control, timeout=10, signer=signer) as rpc:
                info = rpc.call(int(MsgType.WORKER_INFO)).body
            assert info["memory_cap"] == 300 * 2**20  # $CROUPIER_WORKER_MEMORY
        cmdlines = _worker_cmdlines(local.popen.pid)
        assert len(cmdlines) == 2, cmdlines
        for cmdline in cmdlines:  # croupier local's own flags
            assert _flag(cmdline, "--split-threshold") == str(64 * 1024)
            assert _flag(cmdline, "--memory-tier-max") == "0"
            assert _flag(cmdline, "--chunk-size") == str(2**20)
    finally:
        _stop(local, children)


@pytest.mark.parametrize("command", [["local", "--workers", "2"], ["demo", "--size", "256MiB"]])
def test_a_sigterm_during_start_up_stops_what_the_command_started(command: list[str], tmp_path: Path) -> None:
    """A SIGTERM while ``croupier local`` (or ``demo``) is still starting its processes: it
    exits and stops every child it had started (it died at once, leaving them running)."""
    log = open(tmp_path / "local.log", "wb")  # noqa: SIM115 (closed below)
    data = ["--data-dir", str(tmp_path / "local")] if command[0] == "local" else []
    local = subprocess.Popen(
        [*CLI, *command, *data],
        stdout=subprocess.DEVNULL,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    seen: set[int] = set()
    try:

        def started() -> bool:  # the master and a worker or two
            seen.update(_children(local.pid))
            return len(seen) >= 3

        wait_until(started, timeout=60, interval=0.01)
        local.send_signal(signal.SIGTERM)  # the cluster is not up yet
        assert local.wait(60) != 0
        wait_until(lambda: not any(_alive(c) for c in seen), timeout=30)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait(10)
        for child in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        log.close()
