"""Issue 22 §3.12: ``croupier master`` and ``croupier worker`` print their URL (id) as the first
line of stdout, and logs go to stderr only; captured together (``2>&1``), the first line is
still the URL: the start-up log lines wait until it is out."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from integration.procs import CLI

pytestmark = pytest.mark.integration


def _first_line_merged(args: list[str], until: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The first line of the process's stdout and stderr captured as one stream, and the rest
    up to the line holding ``until`` (then SIGTERM)."""
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    rest: list[str] = []
    try:
        first = proc.stdout.readline().decode().rstrip("\n")
        for _ in range(100_000):  # the start-up's lines, up to one logged after the first line
            line = proc.stdout.readline().decode(errors="replace")
            rest.append(line)
            if not line or until in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        proc.stdout.close()
    return first, "".join(rest)


def test_the_master_url_is_the_first_line_of_stdout_and_stderr_together(tmp_path: Path) -> None:
    args = ["--log-level", "debug", "master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "m")]
    first, rest = _first_line_merged(args, "data dir")
    assert first.startswith("tcp://127.0.0.1:"), f"first line {first!r}, then:\n{rest}"
    assert "created the cluster secret" in rest and "data dir" in rest  # the start-up's lines, after it


def test_the_worker_id_is_the_first_line_of_stdout_and_stderr_together(tmp_path: Path) -> None:
    master = subprocess.Popen(
        [*CLI, "master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "m")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert master.stdout is not None
        url = master.stdout.readline().decode().strip()
        secret = tmp_path / "m" / "secret"
        env = {"CROUPIER_SECRET_FILE": str(secret)}
        args = ["--log-level", "debug", "worker", "--master", url, "--dirs", str(tmp_path / "w")]
        first, rest = _first_line_merged(args, ", dirs ", env)
        assert first.startswith("worker-"), f"first line {first!r}, then:\n{rest}"
        assert "Starting FlusherActor" in rest and ", dirs " in rest  # the start-up's lines, after it
    finally:
        master.send_signal(signal.SIGTERM)
        master.communicate(timeout=60)
