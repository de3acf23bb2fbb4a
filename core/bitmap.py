"""Partition bitmaps: which partitions a map attempt declared at MAPPER_END (PROTOCOL §4).

A bitmap of ``n`` partitions is ``ceil(n / 8)`` bytes; partition ``p`` is bit
``(byte[p // 8] >> (p % 8)) & 1`` (least significant bit first). On the wire and in
the log it is standard base64 with padding. Pure functions; no state.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from croupier.core.errors import BadRequest

__all__ = [
    "bitmap_size",
    "decode_bitmap",
    "encode_bitmap",
    "from_partitions",
    "has",
    "partitions_of",
    "ranges",
    "validate_bitmap",
]


def bitmap_size(num_partitions: int) -> int:
    """Bytes in a bitmap of ``num_partitions`` bits."""
    return (num_partitions + 7) // 8


def from_partitions(partitions: Iterable[int], num_partitions: int) -> bytes:
    """The bitmap with exactly ``partitions`` set.

    Raises:
        ValueError: a partition outside ``0..num_partitions-1``.
    """
    out = bytearray(bitmap_size(num_partitions))
    for p in partitions:
        if not 0 <= p < num_partitions:
            raise ValueError(f"partition {p} is out of range 0..{num_partitions - 1}")
        out[p >> 3] |= 1 << (p & 7)
    return bytes(out)


def encode_bitmap(bitmap: bytes) -> str:
    """Standard base64, with padding."""
    return base64.b64encode(bitmap).decode("ascii")


# Decoded short bitmaps, by their text: a MAPPER_END's bitmap is read when it is decoded,
# decided and folded, and the maps of a shuffle mostly declare the same few bitmaps.
# Bounded (emptied when full); only pure values, so sharing it between threads is safe.
_DECODED: dict[str, bytes] = {}
_MEMO_CHARS = 344  # bitmaps of up to 2,048 partitions
_MEMO_ENTRIES = 4096


def decode_bitmap(text: str) -> bytes:
    """The bytes of a base64 bitmap.

    Raises:
        BadRequest: not standard base64 with padding.
    """
    if type(text) is str and len(text) <= _MEMO_CHARS:
        hit = _DECODED.get(text)
        if hit is not None:
            return hit
    try:
        bitmap = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise BadRequest(f"partitions is not standard base64: {exc}") from exc
    if type(text) is str and len(text) <= _MEMO_CHARS:
        if len(_DECODED) >= _MEMO_ENTRIES:
            _DECODED.clear()
        _DECODED[text] = bitmap
    return bitmap


def validate_bitmap(bitmap: bytes, num_partitions: int, touched: int) -> None:
    """Check a declared bitmap against its shuffle and the attempt's ``touched`` count.

    Raises:
        BadRequest: a wrong length, a bit set past ``num_partitions``, or a popcount
            other than ``touched``.
    """
    size = bitmap_size(num_partitions)
    if len(bitmap) != size:
        raise BadRequest(f"partitions has {len(bitmap)} bytes; {num_partitions} partitions need {size}")
    spare = size * 8 - num_partitions
    if spare and bitmap[-1] >> (8 - spare):
        raise BadRequest(f"partitions sets bits past partition {num_partitions - 1}")
    count = int.from_bytes(bitmap, "little").bit_count()
    if count != touched:
        raise BadRequest(f"partitions sets {count} bits but touched is {touched}")


def has(bitmap: bytes, partition: int) -> bool:
    """Whether ``partition`` is set (False past the bitmap's end)."""
    byte = partition >> 3
    return byte < len(bitmap) and bool((bitmap[byte] >> (partition & 7)) & 1)


def partitions_of(bitmap: bytes) -> list[int]:
    """The set partitions, ascending."""
    return [i * 8 + b for i, byte in enumerate(bitmap) if byte for b in range(8) if (byte >> b) & 1]


def ranges(ids: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Ascending ids as sorted half-open ``(lo, hi)`` ranges of consecutive ids."""
    out: list[tuple[int, int]] = []
    lo = hi = -1
    for i in ids:
        if i == hi:
            hi += 1
            continue
        if hi > lo:
            out.append((lo, hi))
        lo, hi = i, i + 1
    if hi > lo:
        out.append((lo, hi))
    return tuple(out)
