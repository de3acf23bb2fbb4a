"""``keep_heap``: a worker keeps the heap pages it faulted in (issue 25)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_heap_is_taken_by_glibc() -> None:
    # in a child: the settings stay with the process that takes them
    code = "from croupier.ops.heap import keep_heap; print(keep_heap(2**30))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


def test_the_worker_command_keeps_its_heap() -> None:
    import inspect

    from croupier.services.cli import worker

    assert "keep_heap(config.memory_cap)" in inspect.getsource(worker._serve_worker)
