"""Batch digests (PROTOCOL §5.1): what writers put in a batch header and what readers and workers check.

``core`` is stdlib-only, so the hash (blake3) lives here, shared by the SDK (writers
compute, readers verify) and the workers' push path (verify before storing). Pure
functions; blake3 releases the GIL on large inputs.
"""

from __future__ import annotations

import blake3

from croupier.core.batch import DIGEST_SIZE, BatchHeader

__all__ = ["batch_digest", "digest_ok"]


def batch_digest(data: bytes | bytearray | memoryview) -> bytes:
    """The digest a batch header carries for ``data``: blake3, first 16 bytes."""
    return blake3.blake3(data).digest(length=DIGEST_SIZE)


def digest_ok(header: BatchHeader, data: bytes | bytearray | memoryview) -> bool:
    """Whether ``header``'s digest matches ``data`` (the batch's bytes after its header)."""
    return batch_digest(data) == header.digest
