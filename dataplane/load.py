"""``LoadSampler``: the load figures a worker sends with each heartbeat (DESIGN §6 placement).

- ``disk_util``: the busiest data directory's share of time with I/O in progress since
  the last sample. It is read from the device's ``io_ticks``
  (``/sys/dev/block/MAJ:MIN/stat``, field 10, what ``iostat`` shows as %util). For a
  directory whose device has no such file (tmpfs, overlay, another OS), it is the
  share of time that directory's flusher spent writing.
- ``io_wait``: the machine's share of CPU time spent in iowait since the last sample
  (``/proc/stat``); 0 where that file is missing.

Both are clamped to [0, 1]. The first ``sample`` covers the time since the sampler
was made.

``DiskRoom``: each data directory's free space, reserve and health (issue 15), read at most
every ``ttl`` seconds, for heartbeats and for the push handler. It says whether the disks
are *ample*: every directory healthy and one of them able to take the worker's whole memory
budget above its reserve. While they are, a flush that fails on one directory can always be
moved to another, so a push that carries seals is answered from memory; otherwise it is
answered only once its locations are flushed (``PushHandler``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from croupier.storage.store import DirState

__all__ = ["DiskRoom", "LoadSampler"]

log = logging.getLogger(__name__)

_IO_TICKS = 9  # 0-based field of a block device's stat file: milliseconds with I/O in progress


@dataclass(frozen=True, slots=True)
class _Reading:
    wall: float
    ticks: list[int | None]  # per directory, io_ticks in ms (None: no device file)
    busy: list[float]  # per directory, its flusher's busy seconds
    cpu: tuple[int, int] | None  # (iowait, total) jiffies


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


class LoadSampler:
    """Parameters:
    dirs: the worker's data directories, in flusher order.
    flusher_busy: returns each flusher's busy seconds so far, in the same order.
    sys_root, proc_root: where ``/sys`` and ``/proc`` are (tests point them elsewhere).
    clock: monotonic seconds.
    """

    def __init__(
        self,
        dirs: Sequence[Path],
        flusher_busy: Callable[[], Sequence[float]],
        *,
        sys_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._flusher_busy = flusher_busy
        self._proc_stat = proc_root / "stat"
        self._clock = clock
        self.devices: list[Path | None] = [self._device_stat(sys_root, d) for d in dirs]
        self._last = self._read()

    @staticmethod
    def _device_stat(sys_root: Path, directory: Path) -> Path | None:
        try:
            st = os.stat(directory)
        except OSError:
            return None
        path = sys_root / "dev" / "block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" / "stat"
        return path if path.is_file() else None

    def _read(self) -> _Reading:
        ticks: list[int | None] = []
        for path in self.devices:
            value: int | None = None
            if path is not None:
                try:
                    value = int(path.read_text().split()[_IO_TICKS])
                except (OSError, ValueError, IndexError):
                    value = None
            ticks.append(value)
        cpu: tuple[int, int] | None = None
        try:
            with open(self._proc_stat) as fh:
                fields = fh.readline().split()
            if fields and fields[0] == "cpu":
                jiffies = [int(x) for x in fields[1:]]
                # user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
                cpu = (jiffies[4], sum(jiffies[:8]))
        except (OSError, ValueError, IndexError):
            cpu = None
        return _Reading(self._clock(), ticks, list(self._flusher_busy()), cpu)

    def sample(self) -> tuple[float, float]:
        """``(disk_util, io_wait)`` since the previous sample."""
        now = self._read()
        last, self._last = self._last, now
        span = now.wall - last.wall
        if span <= 0:
            return 0.0, 0.0
        disk = 0.0
        for i in range(max(len(now.ticks), len(now.busy))):
            t1 = now.ticks[i] if i < len(now.ticks) else None
            t0 = last.ticks[i] if i < len(last.ticks) else None
            if t1 is not None and t0 is not None:
                util = (t1 - t0) / 1000.0 / span
            elif i < len(now.busy) and i < len(last.busy):
                util = (now.busy[i] - last.busy[i]) / span
            else:
                util = 0.0
            disk = max(disk, _clamp(util))
        io_wait = 0.0
        if now.cpu is not None and last.cpu is not None and now.cpu[1] > last.cpu[1]:
            io_wait = _clamp((now.cpu[0] - last.cpu[0]) / (now.cpu[1] - last.cpu[1]))
        return disk, io_wait


class DiskRoom:
    """Parameters:
    states: reads each directory's ``DirState`` (``PartitionStore.dir_states``).
    memory_cap: the worker's memory budget (``--memory``).
    ttl: seconds a reading is reused.
    clock: monotonic seconds.
    """

    def __init__(
        self,
        states: Callable[[], list[DirState]],
        memory_cap: int,
        *,
        ttl: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._states = states
        self._cap = memory_cap
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._last: list[DirState] = []

    def states(self) -> list[DirState]:
        """The directories' states, read again when the last reading is older than ``ttl``."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._ttl:
                self._last, self._read_at = self._states(), now
            return self._last

    def ample(self) -> bool:
        """Every directory healthy, and one with the whole memory budget free above its reserve."""
        states = self.states()
        return all(st.healthy for st in states) and any(st.free - st.reserve >= self._cap for st in states)

    def usable(self) -> bool:
        """Whether some directory may get new locations (healthy, free at or above its reserve)."""
        return any(st.usable for st in self.states())
