"""``TimedLog``: an event log that reports each append's size and duration.

The master's metrics (``croupier.ops.metrics.MasterMetrics.appended``) are wired in by the
services as a plain callable, so that ``ha/`` never imports ``ops/`` (DESIGN §3).

Usage::

    log = TimedLog(FileEventLog(path), metrics.appended)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from croupier.ha.eventlog import EventLog

__all__ = ["TimedLog"]


class TimedLog:
    """An ``EventLog`` that reports each append's size and duration to ``appended(records, seconds)``."""

    def __init__(self, inner: EventLog, appended: Callable[[int, float], None]) -> None:
        self.inner = inner
        self._appended = appended
        self.max_record_bytes = inner.max_record_bytes
        self.max_batch_bytes = inner.max_batch_bytes
        self.kind = type(inner).__name__  # what STATUS names the log

    def append(self, records: Sequence[bytes]) -> int:
        t0 = time.perf_counter()
        seq = self.inner.append(records)
        self._appended(len(records), time.perf_counter() - t0)
        return seq

    def read(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        return self.inner.read(after)

    def last_seq(self) -> int:
        return self.inner.last_seq()

    def write_snapshot(self, seq: int, data: bytes) -> None:
        self.inner.write_snapshot(seq, data)

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        return self.inner.latest_snapshot()

    def close(self) -> None:
        self.inner.close()
