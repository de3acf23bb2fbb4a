"""The snapshots of a ZooKeeper event log (``croupier.ha.zklog``): chunks and their pointer.

Snapshot pointer (``snapshots/latest``), UTF-8 JSON::

    {"seq": 1234, "dir": "snap-00000000000000001234-3f2a9c1b07de", "chunks": 3,
     "size": 2097152, "crc32": 271828182}

``crc32`` is ``zlib.crc32`` of the whole snapshot data. A snapshot is written
as: its directory and chunks first (nobody looks at them yet), then the
pointer in one (fenced) transaction, which makes it visible atomically; only
then are the log batches wholly ``<= seq`` and the older snapshot directories
deleted. A batch that straddles ``seq`` is kept and its early records are
skipped on read. A crash between the steps leaves garbage that the next
writer's open deletes.

Usage (the log, under its lock)::

    name, pointer = write_chunks(calls, "/croupier/snapshots", seq, data, step=900 * 1024)
    # then set <root>/snapshots/latest to ``pointer`` in one fenced transaction
    seq, data = read_snapshot(calls, "/croupier/snapshots", "/croupier/snapshots/latest")
"""

from __future__ import annotations

import json
import logging
import re
import uuid
import zlib
from dataclasses import dataclass

from kazoo.exceptions import KazooException

from croupier.core.errors import Unavailable
from croupier.ha.zkbatch import corrupted
from croupier.ha.zkcalls import ZkCalls

__all__ = [
    "SNAPSHOT_DIR",
    "SnapshotPointer",
    "delete_quietly",
    "read_pointer",
    "read_snapshot",
    "write_chunks",
]

log = logging.getLogger("croupier.ha.zklog")

SNAPSHOT_DIR = re.compile(r"snap-(\d{20})-[0-9a-f]+")


@dataclass(frozen=True)
class SnapshotPointer:
    """The data of ``snapshots/latest``: which directory holds the snapshot at ``seq``."""

    seq: int
    dir: str
    chunks: int
    size: int
    crc32: int


def read_pointer(calls: ZkCalls, path: str) -> SnapshotPointer | None:
    """The pointer at ``path``; None when it is empty (no snapshot yet).

    Raises:
        LogCorrupted: it is not a valid pointer.
        Unavailable: ZooKeeper failed.
    """
    data, _stat = calls.call(f"read {path}", calls.zk.get_async, path)
    if not data:
        return None
    try:
        raw = json.loads(data)
        pointer = SnapshotPointer(
            seq=int(raw["seq"]),
            dir=str(raw["dir"]),
            chunks=int(raw["chunks"]),
            size=int(raw["size"]),
            crc32=int(raw["crc32"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise corrupted(path, f"snapshot pointer is not valid JSON ({exc}): {data[:200]!r}") from exc
    if pointer.seq < 0 or pointer.chunks < 0 or not SNAPSHOT_DIR.fullmatch(pointer.dir):
        raise corrupted(path, f"snapshot pointer is invalid: {raw}")
    return pointer


def write_chunks(calls: ZkCalls, snapshots_path: str, seq: int, data: bytes, step: int) -> tuple[str, bytes]:
    """Write ``data`` as a new snapshot directory of ``step``-byte chunks (nobody looks at it
    yet); returns its name and the pointer's data that makes it visible. On failure the
    directory is deleted (quietly) and the error raised."""
    name = f"snap-{seq:020d}-{uuid.uuid4().hex[:12]}"
    directory = f"{snapshots_path}/{name}"
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    try:
        calls.create_idempotent(directory, b"")
        calls.create_many([(f"{directory}/chunk-{i:06d}", c) for i, c in enumerate(chunks)])
    except BaseException:
        delete_quietly(calls, directory)
        raise
    pointer = json.dumps(
        {"seq": seq, "dir": name, "chunks": len(chunks), "size": len(data), "crc32": zlib.crc32(data)}
    ).encode()
    return name, pointer


def delete_quietly(calls: ZkCalls, path: str) -> None:
    """Delete an unused snapshot directory; a failure only warns (the next writer's open does it)."""
    try:
        calls.delete_tree(path)
    except (KazooException, calls.timeout_error, Unavailable) as exc:
        log.warning("event log %s: could not delete the unused snapshot %s: %s", calls.root, path, exc)


def read_snapshot(calls: ZkCalls, snapshots_path: str, pointer_path: str) -> tuple[int, bytes] | None:
    """The newest snapshot's ``(seq, data)``: the pointer, then every chunk, checked by the crc.

    Raises:
        LogCorrupted: a chunk is missing, or the data does not match the pointer's size and crc.
        Unavailable: ZooKeeper failed.
    """
    previous: SnapshotPointer | None = None
    while True:
        pointer = read_pointer(calls, pointer_path)
        if pointer is None:
            return None
        directory = f"{snapshots_path}/{pointer.dir}"
        paths = [f"{directory}/chunk-{i:06d}" for i in range(pointer.chunks)]
        chunks = calls.fetch_many(paths, "read the snapshot")
        missing = [p for p, c in zip(paths, chunks, strict=True) if c is None]
        if missing:
            if pointer != previous:
                previous = pointer  # a newer snapshot may have replaced it: look again
                continue
            raise corrupted(missing[0], f"snapshot chunk is missing (pointer {pointer})")
        data = b"".join(c for c in chunks if c is not None)
        if len(data) != pointer.size or zlib.crc32(data) != pointer.crc32:
            raise corrupted(
                directory,
                f"snapshot data ({len(data)} bytes, crc32 {zlib.crc32(data)}) does not match its"
                f" pointer ({pointer.size} bytes, crc32 {pointer.crc32})",
            )
        return pointer.seq, data
