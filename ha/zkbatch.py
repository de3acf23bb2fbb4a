"""The data of one batch znode of the ZooKeeper event log (``croupier.ha.zklog``): its codec.

Batch znode data (all integers little-endian)::

    offset  size  field
    0       8     first_seq   u64: seq of the batch's first record (the previous batch's last + 1)
    8       4     count       u32: number of records in the batch (>= 1)
    12      4     length      u32: bytes of record 1    } repeated count times
    16      len   record      the caller's opaque bytes  }

The batch is exactly as long as its records need: trailing bytes, a short
record or ``count`` disagreeing with the data raise ``LogCorrupted``. Its
encoding is at most ``max_group_bytes`` (900 KiB by default), because a znode
over ZooKeeper's ~1 MiB limit drops the connection instead of failing cleanly;
``append`` checks the size first and raises ``ValueError``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

from croupier.ha.eventlog import LogCorrupted

__all__ = [
    "BATCH_NAME",
    "BATCH_PREFIX",
    "DEFAULT_MAX_GROUP_BYTES",
    "GROUP_HEADER",
    "RECORD_LENGTH",
    "corrupted",
    "counter",
    "decode_group",
    "encode_group",
]

GROUP_HEADER = struct.Struct("<QI")
RECORD_LENGTH = struct.Struct("<I")
BATCH_PREFIX = "batch-"
BATCH_NAME = re.compile(r"batch-(-?\d+)")
DEFAULT_MAX_GROUP_BYTES = 900 * 1024


def encode_group(first_seq: int, records: Sequence[bytes]) -> bytes:
    """One batch znode's data: ``<QI`` first_seq and count, then ``<I`` length + bytes per record."""
    parts = [GROUP_HEADER.pack(first_seq, len(records))]
    for record in records:
        parts.append(RECORD_LENGTH.pack(len(record)))
        parts.append(record)
    return b"".join(parts)


def decode_group(data: bytes, path: str) -> tuple[int, list[bytes]]:
    """``(first_seq, records)`` of one batch znode.

    Raises:
        LogCorrupted: the data is not exactly one encoded group (``details["path"]`` names the znode).
    """
    if len(data) < GROUP_HEADER.size:
        raise corrupted(path, f"batch is {len(data)} bytes, shorter than its {GROUP_HEADER.size}-byte header")
    first_seq, count = GROUP_HEADER.unpack_from(data)
    if first_seq < 1:
        raise corrupted(path, f"batch starts at seq {first_seq}; seqs start at 1")
    records: list[bytes] = []
    offset = GROUP_HEADER.size
    for i in range(count):
        if offset + RECORD_LENGTH.size > len(data):
            raise corrupted(path, f"batch ends inside the length of record {i} of {count}")
        (length,) = RECORD_LENGTH.unpack_from(data, offset)
        offset += RECORD_LENGTH.size
        if offset + length > len(data):
            raise corrupted(path, f"record {i} of {count} claims {length} bytes; the batch ends first")
        records.append(data[offset : offset + length])
        offset += length
    if offset != len(data):
        raise corrupted(path, f"{len(data) - offset} bytes follow the last of the batch's {count} records")
    return first_seq, records


def corrupted(path: str, why: str) -> LogCorrupted:
    """The error for a znode of the log that does not hold what it should."""
    return LogCorrupted(f"event log znode {path}: {why}", {"path": path})


def counter(name: str) -> int:
    """The sequence counter ZooKeeper gave a batch znode (``batch-0000000042`` is 42)."""
    m = BATCH_NAME.fullmatch(name)
    assert m is not None, name
    return int(m[1])
