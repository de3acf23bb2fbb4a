"""LocalCluster's child processes never outlive an interrupted start (Ctrl-C in `croupier verify`)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from croupier.services.local import _Child

pytestmark = pytest.mark.integration


class _Interrupted(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _running(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", "--", marker], capture_output=True, text=True, check=False)
    return found.stdout.split()


@pytest.mark.usefixtures("alarm")
def test_a_child_interrupted_before_it_is_up_is_killed_not_left_behind(tmp_path: Path) -> None:
    # a worker whose master never answers prints its id only after it has started; the alarm
    # interrupts the wait for that line, as Ctrl-C does
    marker = str(tmp_path / "interrupted-worker")
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    with pytest.raises(_Interrupted):
        _Child(["worker", "--master", "tcp://127.0.0.1:1", "--dirs", marker], tmp_path / "worker.log", [])
    assert _running(marker) == []
