"""``tools/phase_cpu.settle``: a push is measured until the workers' CPU settles, so the
flushes and commits it leaves behind count to it, not to the first read."""

from __future__ import annotations

import pytest

from croupier.tools import phase_cpu
from croupier.tools.phase_cpu import IDLE_CPU_S, settle


class _Workers:
    """CPU-s so far of workers that stay busy for ``busy`` more reads, then go quiet."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.total = 10.0

    def __call__(self) -> float:
        if self.busy > 0:
            self.busy -= 1
            self.total += 0.4  # flushing and committing
        else:
            self.total += IDLE_CPU_S / 2  # heartbeats
        return self.total


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phase_cpu, "SETTLE_STEP_S", 0.0)


def test_work_left_behind_counts_until_the_cpu_is_quiet() -> None:
    workers = _Workers(busy=6)
    assert settle(workers) == pytest.approx(10.0 + 6 * 0.4)  # all the busy steps, no quiet one


def test_workers_already_quiet_settle_at_once() -> None:
    workers = _Workers(busy=0)
    assert settle(workers) == pytest.approx(10.0 + IDLE_CPU_S / 2)


def test_workers_that_never_settle_stop_at_the_timeout() -> None:
    workers = _Workers(busy=10**9)
    assert settle(workers, timeout=0.0) == pytest.approx(10.0 + 2 * 0.4)
