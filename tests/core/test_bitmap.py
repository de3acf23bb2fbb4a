"""Partition bitmaps: encode/decode round trips, validation, bit tests and ranges."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.bitmap import (
    bitmap_size,
    decode_bitmap,
    encode_bitmap,
    from_partitions,
    has,
    partitions_of,
    ranges,
    validate_bitmap,
)
from croupier.core.errors import BadRequest


@st.composite
def declared(draw: st.DrawFn) -> tuple[int, set[int]]:
    n = draw(st.integers(1, 300))
    return n, draw(st.sets(st.integers(0, n - 1), max_size=n))


@given(declared())
def test_a_bitmap_round_trips_and_passes_validation(case: tuple[int, set[int]]) -> None:
    n, parts = case
    bitmap = from_partitions(parts, n)
    assert len(bitmap) == bitmap_size(n)
    assert decode_bitmap(encode_bitmap(bitmap)) == bitmap
    assert partitions_of(bitmap) == sorted(parts)
    assert [p for p in range(n + 9) if has(bitmap, p)] == sorted(parts)
    validate_bitmap(bitmap, n, len(parts))


def test_the_layout_is_lsb_first_standard_base64() -> None:
    assert encode_bitmap(from_partitions([0, 9], 10)) == "AQI="  # bytes 0x01 0x02
    assert from_partitions([7], 8) == b"\x80"


@given(declared(), st.integers(0, 7))
def test_a_wrong_count_length_or_padding_bit_is_refused(case: tuple[int, set[int]], extra: int) -> None:
    n, parts = case
    bitmap = from_partitions(parts, n)
    with pytest.raises(BadRequest, match="touched"):
        validate_bitmap(bitmap, n, len(parts) + 1)
    with pytest.raises(BadRequest, match="bytes"):
        validate_bitmap(bitmap + b"\x00", n, len(parts))
    spare = bitmap_size(n) * 8 - n
    if spare:
        padded = bytearray(bitmap)
        padded[-1] |= 1 << (7 - extra % spare)
        with pytest.raises(BadRequest, match="past partition"):
            validate_bitmap(bytes(padded), n, len(parts) + 1)


@pytest.mark.parametrize("text", ["A", "AQ", "AQ=", "A Q==", "é", "AQ==AQ=="])
def test_text_that_is_not_padded_standard_base64_is_refused(text: str) -> None:
    with pytest.raises(BadRequest, match="base64"):
        decode_bitmap(text)


def test_out_of_range_partitions_cannot_be_encoded() -> None:
    with pytest.raises(ValueError, match="out of range"):
        from_partitions([10], 10)


@given(st.sets(st.integers(0, 500)))
def test_ranges_cover_exactly_the_ids_sorted_and_disjoint(ids: set[int]) -> None:
    out = ranges(sorted(ids))
    assert [i for lo, hi in out for i in range(lo, hi)] == sorted(ids)
    assert all(lo < hi for lo, hi in out)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(out))  # never adjacent: merged
