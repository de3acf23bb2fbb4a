"""Batches and keys for the storage tests."""

from __future__ import annotations

from croupier.core.batch import FLAG_SEAL, BatchHeader
from croupier.core.enums import CopyRole
from croupier.storage.index import IndexBuilder
from croupier.storage.store import ChunkIndex, LocationKey, PartitionFile
from croupier.transports.digest import batch_digest


def key(
    app: str = "app-1", shuffle: int = 0, partition: int = 0, epoch: int = 0, role: str = CopyRole.PRIMARY
) -> LocationKey:
    return LocationKey(app, shuffle, partition, epoch, role)


def batch(map_id: int, attempt_id: int, batch_id: int, data: bytes) -> tuple[BatchHeader, bytes]:
    """A data batch: its header and its bytes in a file (header + data)."""
    header = BatchHeader(
        map_id, attempt_id, batch_id, len(data), 0, batch_digest(map_id, attempt_id, batch_id, 0, data)
    )
    return header, header.encode() + data


def seal(map_id: int, attempt_id: int, count: int) -> tuple[BatchHeader, bytes]:
    header = BatchHeader(
        map_id, attempt_id, count, 0, FLAG_SEAL, batch_digest(map_id, attempt_id, count, FLAG_SEAL, b"")
    )
    return header, header.encode()


def append(f: PartitionFile, builder: IndexBuilder, batches: list[tuple[BatchHeader, bytes]]) -> bytes:
    """Write ``batches`` to ``f`` in one call (header and data as separate pieces, as a flusher does)."""
    pieces: list[bytes | memoryview] = []
    for header, raw in batches:
        view = memoryview(raw)
        pieces += [view[:36], view[36:]]
        builder.add(header, len(raw))
    f.write(pieces)
    return b"".join(raw for _, raw in batches)


def whole(size: int) -> ChunkIndex:
    """An index for bytes that are not batches: one chunk over the whole file."""
    return ChunkIndex(chunks=((0, size),) if size else (), batches=0, seals=(), size=size)
