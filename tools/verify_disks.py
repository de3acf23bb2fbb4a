"""Small filesystems for ``croupier verify``'s ``disk-full`` fault.

``small_disks(base, workers, size)`` mounts a tmpfs of ``size`` on every worker's data
directory of a ``LocalCluster`` rooted at ``base`` (``<base>/worker<i>/disk0``) before it
starts, and unmounts them (then deletes ``base``) at the end. Mounting needs root: without
it, or without ``mount``, it raises ``ValueError`` before anything is started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DISK_SIZE", "small_disks", "tmpfs_mounts"]

DISK_SIZE = "128m"  # each worker's directory: a few verified shuffles' worth, filled in a blink


@contextlib.contextmanager
def tmpfs_mounts(paths: list[Path], size: str) -> Iterator[None]:
    """A tmpfs of ``size`` on each of ``paths`` (created), unmounted at the end.

    Raises:
        ValueError: not root, or a mount failed (the message says why).
    """
    if os.geteuid() != 0:
        raise ValueError("mounting small filesystems needs root")
    mounted: list[Path] = []
    try:
        for path in paths:
            path.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise ValueError(f"cannot mount a tmpfs on {path}: {done.stderr.strip()}")
            mounted.append(path)
        yield
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def small_disks(base: Path, workers: int, size: str = DISK_SIZE) -> Iterator[Path]:
    """Yield ``base`` with a tmpfs of ``size`` on each worker's ``disk0``.

    Raises:
        ValueError: not root, or a mount failed.
    """
    if os.geteuid() != 0:
        raise ValueError("the disk-full fault mounts small filesystems: run as root")
    try:
        with tmpfs_mounts([base / f"worker{i}" / "disk0" for i in range(workers)], size):
            yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
