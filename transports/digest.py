"""Batch digests (PROTOCOL §5.1): what writers put in a batch header and what readers and workers check.

The digest covers the header's first 20 bytes (``<IIIII``: map_id, attempt_id,
batch_id, length, flags) and then the data, so a flipped bit in a seal's count
or a batch's map id is caught like one in its records. On a cluster with a secret
it is blake3 **keyed by the app key** (``REGISTER_APP``'s ``app_key``), so only the
app's writers can make a batch its readers and the workers accept; a server with no
secret (library use) keeps the unkeyed digest. ``core`` is stdlib-only, so the hash
(blake3) lives here, shared by the SDK (writers compute, readers verify) and the
workers' push path (verify before storing). Pure functions, plus ``AppKeys``: the
workers' bounded cache of the keys they derive. blake3 releases the GIL on large inputs.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable

import blake3

from croupier.core.batch import DIGEST_SIZE, BatchHeader
from croupier.transports.secret import AppTags, ClusterSecret

__all__ = ["APP_KEY_SIZE", "AppKeys", "batch_digest", "digest_ok"]

APP_KEY_SIZE = 32
_COVERED = struct.Struct("<IIIII")  # the header up to its digest
# Hashing the 20 header bytes and then the data in two updates leaves blake3 off its
# chunk alignment, so its first subtrees are hashed narrow: a fixed ~5 us, half the cost
# of a 64 KiB batch. So the header is joined to the data's first ``_HEAD`` bytes (blake3's
# 16-chunk subtree, its widest), and the rest of the data goes in a second update that
# starts aligned: only 16 KiB of a batch is copied, not all of it (issue 25; a batch the
# worker checks is cold in the cache, so that copy was most of the join's memmove). Up to
# ``_JOIN_UPTO`` bytes of data the whole batch is joined: a second update costs more there.
_HEAD = 16 * 1024 - _COVERED.size
_JOIN_UPTO = 32 * 1024


def batch_digest(
    map_id: int,
    attempt_id: int,
    batch_id: int,
    flags: int,
    data: bytes | bytearray | memoryview,
    key: bytes | None = None,
) -> bytes:
    """The digest a batch header carries: blake3 of the header's first 20 bytes and ``data``,
    first 16 bytes, keyed by ``key`` (the 32-byte app key) when given. The header's length
    field is ``len(data)``.

    Raises:
        ValueError: ``key`` is not 32 bytes.
    """
    covered = _COVERED.pack(map_id, attempt_id, batch_id, len(data), flags)
    if len(data) <= _JOIN_UPTO:
        joined = b"".join((covered, data))
        h = blake3.blake3(joined) if key is None else blake3.blake3(joined, key=key)
        return h.digest(length=DIGEST_SIZE)
    view = data if isinstance(data, memoryview) else memoryview(data)
    first = b"".join((covered, view[:_HEAD]))
    h = blake3.blake3(first) if key is None else blake3.blake3(first, key=key)
    h.update(view[_HEAD:])
    return h.digest(length=DIGEST_SIZE)


def digest_ok(header: BatchHeader, data: bytes | bytearray | memoryview, key: bytes | None = None) -> bool:
    """Whether ``header``'s digest matches its fields and ``data`` (the batch's bytes after its
    header), keyed by ``key`` when given (a digest made without the key, or with another, fails)."""
    if header.length != len(data):
        return False
    expected = batch_digest(header.map_id, header.attempt_id, header.batch_id, header.flags, data, key)
    return expected == header.digest


class AppKeys:
    """The app keys a worker checks digests with: derived from the cluster secret and the
    key tag of the app's registration (``tags``, from ``RESERVE``; no lookup at the master),
    the most recent ``capacity`` keys cached. Thread-safe.

    Parameters:
        secret: the cluster secret; None (a server built without one) checks unkeyed digests.
        tags: the key tags known here (None: every app keyed by its id alone, as before tags).
        capacity: how many apps' keys are kept.
    """

    def __init__(
        self, secret: ClusterSecret | None, tags: AppTags | None = None, capacity: int = 4096
    ) -> None:
        self._tags = tags
        self._derive: Callable[[str, str], bytes] | None = (
            None if secret is None else functools.lru_cache(maxsize=capacity)(secret.app_key)
        )

    def get(self, app_id: str) -> bytes | None:
        """The key of ``app_id``'s batch digests, or None when this server has no secret."""
        if self._derive is None:
            return None
        tag = self._tags.get(app_id) if self._tags is not None else None
        return self._derive(app_id, tag or "")

    def __repr__(self) -> str:  # never print a key
        return f"AppKeys({'keyed' if self._derive is not None else 'unkeyed'})"
