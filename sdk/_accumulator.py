"""The writer's accumulator: per-partition buffers that turn records into batches.

State:
    one ``bytearray`` per touched partition holding packed records (u32 length +
    bytes, ``core/batch.py``); the number of data batches cut per partition (the
    next ``batch_id``, and the seal's count at close); the total bytes buffered.

No sockets and no threads: ``add`` returns the batches a record completed, and
the sender decides where they go. A record larger than the buffer size becomes
a batch of its own (after the partition's partial buffer, to keep the order).
When all partial buffers together pass ``memory_limit``, the largest ones are
cut early so that a writer touching many partitions stays bounded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from croupier.core.batch import (
    BATCH_HEADER,
    FLAG_SEAL,
    MAX_BATCH_BYTES,
    BatchHeader,
    pack_record,
)
from croupier.transports.digest import batch_digest

__all__ = ["Accumulator", "OutBatch", "make_batch"]

_RECORD_PREFIX = 4
_pack_len = struct.Struct("<I").pack
_unpack_len = struct.Struct("<I").unpack
MAX_RECORD_BYTES = MAX_BATCH_BYTES - _RECORD_PREFIX


def _bytes_like(record: object) -> bytes | bytearray | memoryview:
    if isinstance(record, memoryview):
        # length prefixes count bytes, not items
        return record.cast("B") if record.c_contiguous else memoryview(record.tobytes())
    if isinstance(record, bytes | bytearray):
        return record
    raise TypeError(f"a record is bytes-like, got {type(record).__name__}")


@dataclass(frozen=True, slots=True)
class OutBatch:
    """One batch ready to push: its partition, encoded header and data."""

    partition: int
    header: BatchHeader
    data: bytes | memoryview

    @property
    def encoded_header(self) -> bytes:
        return self.header.encode()

    @property
    def size(self) -> int:
        return BATCH_HEADER.size + len(self.data)


def make_batch(
    partition: int,
    map_id: int,
    attempt_id: int,
    batch_id: int,
    data: bytes | memoryview,
    *,
    seal: bool = False,
    key: bytes | None = None,
) -> OutBatch:
    """Build a data batch (or, with ``seal``, a seal whose ``batch_id`` is the data batch count),
    its digest keyed by the app key ``key`` when given (PROTOCOL §5.1)."""
    if seal:
        if data:
            raise ValueError("a seal carries no data")
        digest = batch_digest(map_id, attempt_id, batch_id, FLAG_SEAL, b"", key)
        header = BatchHeader(map_id, attempt_id, batch_id, 0, FLAG_SEAL, digest)
    else:
        digest = batch_digest(map_id, attempt_id, batch_id, 0, data, key)
        header = BatchHeader(map_id, attempt_id, batch_id, len(data), 0, digest)
    return OutBatch(partition, header, data)


class Accumulator:
    """Per-partition buffers for one map attempt.

    Parameters:
        map_id, attempt_id: written into every batch header.
        num_partitions: ``add`` refuses partitions outside ``0..num_partitions-1``.
        buffer_size: a buffer becomes a batch when it reaches this many bytes.
        memory_limit: partial buffers together; above it the largest are cut early.
        key: the app key the batch digests are keyed with (None: unkeyed, a cluster with no secret).
    """

    def __init__(
        self,
        map_id: int,
        attempt_id: int,
        num_partitions: int,
        *,
        buffer_size: int = 64 * 1024,
        memory_limit: int = 64 * 1024**2,
        key: bytes | None = None,
    ) -> None:
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        self.map_id = map_id
        self.attempt_id = attempt_id
        self.num_partitions = num_partitions
        self.buffer_size = buffer_size
        self.memory_limit = max(memory_limit, buffer_size)
        self._key = key
        self._buffers: dict[int, bytearray] = {}
        self._counts: dict[int, int] = {}
        self._buffered = 0
        self.records = 0
        self.bytes_in = 0

    @property
    def touched(self) -> list[int]:
        """Partitions that got at least one record, in first-write order."""
        return list(self._counts)

    @property
    def buffered(self) -> int:
        """Bytes in partial buffers right now."""
        return self._buffered

    def batch_count(self, partition: int) -> int:
        """Data batches cut so far for ``partition`` (the next batch id)."""
        return self._counts.get(partition, 0)

    def _cut(self, partition: int, data: bytes | memoryview) -> OutBatch:
        batch_id = self._counts[partition]
        self._counts[partition] = batch_id + 1
        return make_batch(partition, self.map_id, self.attempt_id, batch_id, data, key=self._key)

    def _take(self, partition: int) -> bytes:
        buf = self._buffers.pop(partition, None)
        if not buf:
            return b""
        self._buffered -= len(buf)
        return bytes(buf)

    def add(self, partition: int, record: bytes | bytearray | memoryview) -> list[OutBatch]:
        """Append one record; return the batches it completed (often none).

        Raises:
            ValueError: a partition out of range, or a record over 256 MiB.
            TypeError: ``record`` is not bytes-like.
        """
        if type(record) is not bytes:
            record = _bytes_like(record)
        size = len(record)
        buf = self._buffers.get(partition)
        if buf is None:  # first record since the last cut: check what the hot path skips
            if not 0 <= partition < self.num_partitions:
                raise ValueError(f"partition {partition} is out of range 0..{self.num_partitions - 1}")
            if partition not in self._counts:
                self._counts[partition] = 0
            buf = self._buffers[partition] = bytearray()
        self.records += 1
        self.bytes_in += size
        if size + _RECORD_PREFIX >= self.buffer_size:
            return self._add_big(partition, record)
        buf += _pack_len(size)
        buf += record
        self._buffered += size + _RECORD_PREFIX
        if len(buf) < self.buffer_size and self._buffered <= self.memory_limit:
            return []
        out = [self._cut(partition, self._take(partition))] if len(buf) >= self.buffer_size else []
        if self._buffered > self.memory_limit:
            out.extend(self._spill())
        return out

    def _add_big(self, partition: int, record: bytes | bytearray | memoryview) -> list[OutBatch]:
        """A record too big to share a buffer: the partial buffer first, then the record alone."""
        if len(record) > MAX_RECORD_BYTES:
            self.records -= 1
            self.bytes_in -= len(record)
            raise ValueError(f"record of {len(record)} bytes exceeds the limit of {MAX_RECORD_BYTES}")
        out: list[OutBatch] = []
        pending = self._take(partition)
        if pending:
            out.append(self._cut(partition, pending))
        # one copy, straight from the caller's buffer (fresh memory is slow to touch here)
        out.append(self._cut(partition, b"".join((pack_record(record), record))))
        return out

    def add_framed(self, partition: int, framed: memoryview) -> list[OutBatch]:
        """One record that comes framed already (its u32 length, then its bytes), as a batch of
        its own and without a copy. ``framed`` must not change until the batch is acked.

        Raises:
            ValueError: a partition out of range, a frame whose length prefix does not match
                it, or a record over 256 MiB.
        """
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"partition {partition} is out of range 0..{self.num_partitions - 1}")
        view = framed.cast("B") if framed.format != "B" or framed.ndim != 1 else framed
        if len(view) < _RECORD_PREFIX or _unpack_len(view[:_RECORD_PREFIX])[0] != len(view) - _RECORD_PREFIX:
            raise ValueError("a framed record starts with its length as u32 little-endian")
        if len(view) - _RECORD_PREFIX > MAX_RECORD_BYTES:
            raise ValueError(
                f"record of {len(view) - _RECORD_PREFIX} bytes exceeds the limit of {MAX_RECORD_BYTES}"
            )
        self._counts.setdefault(partition, 0)
        self.records += 1
        self.bytes_in += len(view) - _RECORD_PREFIX
        out: list[OutBatch] = []
        pending = self._take(partition)
        if pending:
            out.append(self._cut(partition, pending))
        out.append(self._cut(partition, view))
        return out

    def _spill(self) -> list[OutBatch]:
        """Cut the largest partial buffers until at most half the limit is buffered."""
        out: list[OutBatch] = []
        for partition in sorted(self._buffers, key=lambda p: len(self._buffers[p]), reverse=True):
            if self._buffered <= self.memory_limit // 2:
                break
            out.append(self._cut(partition, self._take(partition)))
        return out

    def flush(self) -> list[OutBatch]:
        """Cut every partial buffer into a batch."""
        return [self._cut(p, self._take(p)) for p in list(self._buffers) if self._buffers[p]]

    def seals(self) -> list[OutBatch]:
        """One seal per touched partition; ``batch_id`` = data batches cut. Call after ``flush``."""
        if self._buffered:
            raise RuntimeError("flush() before seals(): partial buffers would be left out")
        return [
            make_batch(p, self.map_id, self.attempt_id, count, b"", seal=True, key=self._key)
            for p, count in self._counts.items()
        ]

    def drop(self) -> None:
        """Forget every partial buffer (abort)."""
        self._buffers.clear()
        self._buffered = 0
