"""The ceiling's flush writers and the /proc readers (the processes run in integration/test_bench.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from croupier.tools import ceiling_roles
from croupier.tools.ceiling import CeilingOptions
from croupier.tools.ceiling_roles import MiB, write_buffered, write_direct
from croupier.tools.proc import cpu_seconds, peak_rss

SIZES = [1, 4095, 4096, 3 * MiB + 17, 4 * MiB, 5 * MiB + 1]


def _buffers() -> list[memoryview]:
    return [memoryview(os.urandom(n)) for n in SIZES]


def test_write_direct_writes_the_exact_bytes_through_an_aligned_stage(tmp_path: Path) -> None:
    buffers = _buffers()
    stage = ceiling_roles._staging_buffer()
    try:
        written = write_direct(str(tmp_path / "d.bin"), buffers, stage)
    finally:
        stage.close()
    assert written == sum(SIZES)
    # the padded last write is truncated back: the file is the data, nothing more
    assert (tmp_path / "d.bin").read_bytes() == b"".join(bytes(b) for b in buffers)


def test_write_buffered_writes_the_exact_bytes(tmp_path: Path) -> None:
    buffers = _buffers()
    assert write_buffered(str(tmp_path / "b.bin"), buffers) == sum(SIZES)
    assert (tmp_path / "b.bin").read_bytes() == b"".join(bytes(b) for b in buffers)


def test_a_filesystem_refusing_o_direct_falls_back_to_the_page_cache_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refuse_direct(path: str, flags: int, *args: Any) -> int:
        if flags & os.O_DIRECT:  # as tmpfs did before Linux 6.6
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse_direct)
    server = ceiling_roles._Server(0, str(tmp_path), flush_replicas=False, cold=False, odirect=True)
    buffers = _buffers()
    assert server._write(str(tmp_path / "f.bin"), buffers) == sum(SIZES)
    assert (tmp_path / "f.bin").read_bytes() == b"".join(bytes(b) for b in buffers)
    assert server.stage is None
    assert "O_DIRECT refused" in server.note and str(tmp_path) in server.note


def test_tuned_prefaults_what_a_server_holds_and_flushes_with_o_direct() -> None:
    tuned = CeilingOptions(total=256 * MiB).tuned()
    assert (tuned.prewarm_mib, tuned.malloc_env, tuned.odirect) == (256 + 64, True, True)
    assert tuned.total == 256 * MiB


def test_proc_readers_see_this_process_and_read_a_missing_one_as_zero() -> None:
    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))  # burn some CPU
    assert cpu_seconds(os.getpid()) > before
    assert peak_rss(os.getpid()) > 0
    assert cpu_seconds(2**22 + 1) == 0.0 and peak_rss(2**22 + 1) == 0  # above pid_max's default
