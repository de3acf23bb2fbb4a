"""What one location costs a worker's disk store, whatever its bytes (issue 25).

Usage::

    python -m croupier.tools.location_cost [--locations 4000] [--dir DIR]

Opens a ``DiskPartitionStore`` (``O_DIRECT`` where the filesystem takes it, as a worker's)
in a new directory under ``--dir`` (the temporary directory by default), then for
``--locations`` locations of one shuffle: ``create``, one write of a 4 KiB batch and its
seal, and ``commit``. Prints one JSON line: the process CPU per location of each step, in
µs, and for reference the CPU of a bare ``open(O_CREAT)`` of as many new files in another
new directory beside it: on some filesystems (this project's VM, ext4) making a file costs
from 30 to over 1,000 µs depending on the directory, which every location pays once (its
data file; its index is a line of the dir's ``index.log`` since issue 25, a file before).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from croupier.core.batch import FLAG_SEAL, BatchHeader
from croupier.storage.disk import DiskPartitionStore
from croupier.storage.index import IndexBuilder
from croupier.storage.store import LocationKey

__all__ = ["location_cost"]


def _us(seconds: float, n: int) -> float:
    return round(seconds / n * 1e6, 1)


def location_cost(locations: int, directory: str | None = None) -> dict[str, Any]:
    """Per-location CPU (µs) of ``create``, the first write and ``commit``; see the module."""
    if locations < 1:
        raise ValueError("locations must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="croupier-location-cost-", dir=directory))
    try:
        data = bytes(4096)
        header = BatchHeader(0, 0, 0, len(data), 0, bytes(16)).encode()
        seal = BatchHeader(0, 0, 1, 0, FLAG_SEAL, bytes(16))
        with DiskPartitionStore([root / "store"], fsync=False, direct=True) as store:
            keys = [LocationKey("app-1", 0, p, 0, "primary") for p in range(locations)]
            t0 = time.process_time()
            files = [store.create(k) for k in keys]
            t1 = time.process_time()
            for f in files:
                f.write([header, data, seal.encode()])
            t2 = time.process_time()
            for f in files:
                builder = IndexBuilder()
                builder.add(BatchHeader.decode(header), len(header) + len(data))
                builder.add(seal, len(header))
                f.commit(builder.build())
            t3 = time.process_time()
            direct = store.direct
        bare = root / "bare"
        bare.mkdir()
        t4 = time.process_time()
        for p in range(locations):
            os.close(os.open(bare / f"{p}.data", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        t5 = time.process_time()
        return {
            "locations": locations,
            "direct": direct,
            "create_us": _us(t1 - t0, locations),
            "first_write_us": _us(t2 - t1, locations),
            "commit_us": _us(t3 - t2, locations),
            "bare_open_creat_us": _us(t5 - t4, locations),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m croupier.tools.location_cost")
    parser.add_argument("--locations", type=int, default=4000)
    parser.add_argument("--dir", default=None, help="where the store's directory is made")
    args = parser.parse_args(argv)
    print(json.dumps(location_cost(args.locations, args.dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
