"""``LoadSampler``: device and CPU counters read from (fake, then real) /sys and /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from croupier.dataplane.load import LoadSampler


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def device_stat(io_ticks: int) -> str:
    # 17 fields as in /sys/block/*/stat; field 10 (index 9) is io_ticks in ms
    fields = [11, 0, 22, 33, 44, 0, 55, 66, 0, io_ticks, 77, 0, 0, 0, 0, 0, 0]
    return " ".join(str(f) for f in fields) + "\n"


def cpu_line(iowait: int, other: int) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return f"cpu  {other} 0 0 0 {iowait} 0 0 0 5 5\ncpu0 1 2 3\n"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A data dir, fake /sys with a stat file for its device, fake /proc."""
    data = tmp_path / "data"
    data.mkdir()
    st = os.stat(data)
    sys_root = tmp_path / "sys"
    dev = sys_root / "dev" / "block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    dev.mkdir(parents=True)
    proc = tmp_path / "proc"
    proc.mkdir()
    return data, sys_root, dev / "stat", proc / "stat"


def test_disk_util_comes_from_io_ticks_and_io_wait_from_proc_stat(
    roots: tuple[Path, Path, Path, Path],
) -> None:
    data, sys_root, dev_stat, proc_stat = roots
    dev_stat.write_text(device_stat(1_000))
    proc_stat.write_text(cpu_line(iowait=10, other=90))
    clock = Clock()
    sampler = LoadSampler([data], lambda: [0.0], sys_root=sys_root, proc_root=proc_stat.parent, clock=clock)
    assert sampler.devices == [dev_stat]
    clock.now += 2.0
    dev_stat.write_text(device_stat(2_500))  # 1.5 s of I/O in 2 s
    proc_stat.write_text(cpu_line(iowait=40, other=160))  # 30 of 100 jiffies
    disk, io_wait = sampler.sample()
    assert disk == pytest.approx(0.75)
    assert io_wait == pytest.approx(0.3)
    clock.now += 1.0
    dev_stat.write_text(device_stat(9_000))  # more than the span: clamped
    disk, io_wait = sampler.sample()
    assert (disk, io_wait) == (1.0, 0.0)


def test_without_device_counters_the_flusher_busy_time_counts(roots: tuple[Path, Path, Path, Path]) -> None:
    data, sys_root, _, proc_stat = roots
    busy = [0.0, 0.0]
    clock = Clock()
    # no stat file for the device, and no /proc/stat: flusher time, io_wait 0
    sampler = LoadSampler(
        [data, data / "missing"],
        lambda: busy,
        sys_root=sys_root / "nowhere",
        proc_root=proc_stat.parent,
        clock=clock,
    )
    assert sampler.devices == [None, None]
    clock.now += 4.0
    busy[:] = [1.0, 3.0]
    assert sampler.sample() == pytest.approx((0.75, 0.0))
    # a store whose disks are not the dirs: only the flushers
    bare = LoadSampler([], lambda: busy, sys_root=sys_root, proc_root=proc_stat.parent, clock=clock)
    clock.now += 2.0
    busy[:] = [2.0, 3.5]
    assert bare.sample() == pytest.approx((0.5, 0.0))
    assert bare.sample() == (0.0, 0.0)  # no time passed


def test_malformed_counters_read_as_unknown(roots: tuple[Path, Path, Path, Path]) -> None:
    data, sys_root, dev_stat, proc_stat = roots
    dev_stat.write_text("garbage\n")
    proc_stat.write_text("intr 1 2 3\n")
    clock = Clock()
    sampler = LoadSampler([data], lambda: [0.5], sys_root=sys_root, proc_root=proc_stat.parent, clock=clock)
    clock.now += 1.0
    assert sampler.sample() == (0.0, 0.0)


def test_the_real_counters_of_this_machine_are_fractions(tmp_path: Path) -> None:
    sampler = LoadSampler([tmp_path], lambda: [0.0])
    with open(tmp_path / "f", "wb") as fh:
        fh.write(os.urandom(1 << 20))
        os.fsync(fh.fileno())
    disk, io_wait = sampler.sample()
    assert 0.0 <= disk <= 1.0 and 0.0 <= io_wait <= 1.0
