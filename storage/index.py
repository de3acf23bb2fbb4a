"""Building a partition file's :class:`~croupier.storage.store.ChunkIndex` while it is written.

A partition file is batches back to back (``croupier.core.batch``). A reader
fetches it one **chunk** at a time, so chunks are cut at batch boundaries and
are about ``chunk_size`` bytes (8 MiB by default, DESIGN §1):

- a new chunk starts before a batch when the current chunk is non-empty and
  the batch would make it exceed ``chunk_size``;
- so a batch larger than ``chunk_size`` is a chunk of its own;
- an empty file has no chunks; the chunks of any other file tile it.

Seal batches are bytes in the file like any other batch (so they belong to
chunks), but they are counted in ``seals`` (``map_id, attempt_id, count``
with ``count`` = the seal's ``batch_id``), not in ``batches``.
"""

from __future__ import annotations

from croupier.core.batch import BATCH_HEADER, BatchHeader, iter_batches
from croupier.core.errors import BadRequest
from croupier.storage.store import ChunkIndex

__all__ = ["DEFAULT_CHUNK_SIZE", "IndexBuilder", "index_of"]

DEFAULT_CHUNK_SIZE = 8 * 1024 * 1024


class IndexBuilder:
    """Builds a ChunkIndex while batches are appended, cutting chunks at batch boundaries about every
    chunk_size bytes.

    Parameters:
        chunk_size: the chunk size to aim for, in bytes (positive).

    State:
        _chunks: the finished chunks, ``(offset, length)``.
        _start, _len: the chunk being filled (``_len == 0``: none yet).
        _batches: data batches added.
        _seals: distinct ``(map_id, attempt_id, count)`` of seals added (a resent
            seal is the same seal, so it is kept once).
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, not {chunk_size}")
        self.chunk_size = chunk_size
        self._chunks: list[tuple[int, int]] = []
        self._start = 0
        self._len = 0
        self._batches = 0
        self._seals: set[tuple[int, int, int]] = set()

    def add(self, header: BatchHeader, total_len: int) -> None:
        """Account for one batch appended to the file (call in file order).

        Parameters:
            header: the batch's header.
            total_len: its bytes in the file: the 36-byte header plus ``header.length``.

        Raises:
            BadRequest: ``total_len`` does not match the header.
        """
        if total_len != BATCH_HEADER.size + header.length:
            raise BadRequest(
                f"batch of {header.length} data bytes takes {BATCH_HEADER.size + header.length} "
                f"bytes in the file, not {total_len}"
            )
        if self._len and self._len + total_len > self.chunk_size:
            self._chunks.append((self._start, self._len))
            self._start += self._len
            self._len = 0
        self._len += total_len
        if header.is_seal:
            self._seals.add((header.map_id, header.attempt_id, header.batch_id))
        else:
            self._batches += 1

    @property
    def seal_count(self) -> int:
        """Distinct seals added so far."""
        return len(self._seals)

    @property
    def size(self) -> int:
        """Bytes added so far."""
        return self._start + self._len

    def build(self) -> ChunkIndex:
        """The index of everything added so far (the builder may go on afterwards)."""
        chunks = [*self._chunks, (self._start, self._len)] if self._len else list(self._chunks)
        return ChunkIndex(
            chunks=tuple(chunks),
            batches=self._batches,
            seals=tuple(sorted(self._seals)),
            size=self.size,
        )


def index_of(data: bytes | memoryview, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ChunkIndex:
    """The index of a whole file's bytes (for recovery tools and tests).

    Raises:
        BadRequest: ``data`` is not whole batches back to back.
    """
    builder = IndexBuilder(chunk_size)
    for _, header, body in iter_batches(data):
        builder.add(header, BATCH_HEADER.size + len(body))
    return builder.build()
