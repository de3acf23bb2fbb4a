"""Batches and records: the byte layouts shared by the SDK, workers and files.

A **batch** is the unit of push: bytes for one partition from one map attempt.
Its 36-byte header (little-endian, ``struct "<IIIII16s"``)::

    offset size field
    0      4    map_id
    4      4    attempt_id
    8      4    batch_id     counts per (map attempt, partition) from 0; for a seal:
                             the number of data batches that attempt sent to the partition
    12     4    length       bytes of data that follow (0 for a seal)
    16     4    flags        bit 0 = SEAL; other bits 0
    20     16   digest       blake3(data), first 16 bytes (of b"" for a seal)

A partition file is batches back to back: header, data, header, data, ...
Workers never look inside data. The SDK packs **records** into a batch's data
as ``u32 length`` + bytes, repeated, so empty records are fine.

Digests are computed outside ``core`` (blake3 is not stdlib): callers pass them in.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from croupier.core.errors import BadRequest

__all__ = [
    "BATCH_HEADER",
    "DIGEST_SIZE",
    "FLAG_SEAL",
    "MAX_BATCH_BYTES",
    "BatchHeader",
    "iter_batches",
    "iter_records",
    "pack_record",
]

BATCH_HEADER = struct.Struct("<IIIII16s")
DIGEST_SIZE = 16
FLAG_SEAL = 1
MAX_BATCH_BYTES = 256 * 1024 * 1024
_RECORD_LEN = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    map_id: int
    attempt_id: int
    batch_id: int
    length: int
    flags: int
    digest: bytes

    @property
    def is_seal(self) -> bool:
        return bool(self.flags & FLAG_SEAL)

    def encode(self) -> bytes:
        return BATCH_HEADER.pack(
            self.map_id, self.attempt_id, self.batch_id, self.length, self.flags, self.digest
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, offset: int = 0) -> BatchHeader:
        """Raises BadRequest on a short buffer, unknown flags or a seal that carries data."""
        if len(data) - offset < BATCH_HEADER.size:
            raise BadRequest(f"batch header needs {BATCH_HEADER.size} bytes, {len(data) - offset} left")
        m, a, b, n, flags, digest = BATCH_HEADER.unpack_from(data, offset)
        if flags & ~FLAG_SEAL:
            raise BadRequest(f"batch has unknown flags {flags:#x}")
        if flags & FLAG_SEAL and n:
            raise BadRequest("a seal carries no data")
        if n > MAX_BATCH_BYTES:
            raise BadRequest(f"batch of {n} bytes exceeds {MAX_BATCH_BYTES}")
        return cls(m, a, b, n, flags, bytes(digest))


def iter_batches(data: bytes | memoryview, base: int = 0) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Walk a run of batches (a chunk or a whole file): yields (offset, header, data view).

    Raises:
        BadRequest: the run ends inside a header or inside a batch's data.
    """
    view = memoryview(data)
    pos = 0
    end = len(view)
    while pos < end:
        header = BatchHeader.decode(view, pos)
        start = pos + BATCH_HEADER.size
        stop = start + header.length
        if stop > end:
            raise BadRequest(f"batch at offset {base + pos} runs past the end ({stop - end} bytes short)")
        yield base + pos, header, view[start:stop]
        pos = stop


def pack_record(record: bytes | bytearray | memoryview) -> bytes:
    """The length prefix of one record (the caller appends the record's bytes after it)."""
    return _RECORD_LEN.pack(len(record))


def iter_records(data: bytes | memoryview) -> Iterator[memoryview]:
    """Split a batch's data into records.

    Raises:
        BadRequest: a record runs past the end of the batch.
    """
    view = memoryview(data)
    pos = 0
    end = len(view)
    unpack = _RECORD_LEN.unpack_from
    while pos < end:
        if end - pos < 4:
            raise BadRequest("record length prefix cut short")
        (n,) = unpack(view, pos)
        pos += 4
        if pos + n > end:
            raise BadRequest(f"record of {n} bytes runs past the end of its batch")
        yield view[pos : pos + n]
        pos += n
