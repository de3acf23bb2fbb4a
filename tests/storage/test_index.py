"""IndexBuilder, ChunkIndex and LocationKey."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.batch import BATCH_HEADER, BatchHeader
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest
from croupier.storage.index import DEFAULT_CHUNK_SIZE, IndexBuilder, index_of
from croupier.storage.store import ChunkIndex, LocationKey
from tests.storage.helpers import batch, seal


def sized(n: int) -> BatchHeader:
    """A data batch header that takes ``n`` bytes in the file."""
    return BatchHeader(0, 0, 0, n - BATCH_HEADER.size, 0, bytes(16))


def chunks_of(sizes: list[int], chunk_size: int) -> tuple[tuple[int, int], ...]:
    b = IndexBuilder(chunk_size)
    for n in sizes:
        b.add(sized(n), n)
    return b.build().chunks


def test_an_empty_file_has_no_chunks() -> None:
    b = IndexBuilder()
    assert b.chunk_size == DEFAULT_CHUNK_SIZE == 8 * 1024 * 1024
    assert b.size == 0
    assert b.build() == ChunkIndex(chunks=(), batches=0, seals=(), size=0)
    assert index_of(b"") == b.build()


def test_chunks_are_cut_at_batch_boundaries() -> None:
    assert chunks_of([40, 40, 40], 100) == ((0, 80), (80, 40))
    assert chunks_of([50, 50, 50], 100) == ((0, 100), (100, 50))  # exactly full is not exceeding
    assert chunks_of([100], 100) == ((0, 100),)
    assert chunks_of([36] * 5, 36) == tuple((36 * i, 36) for i in range(5))


def test_a_big_batch_is_a_chunk_of_its_own() -> None:
    assert chunks_of([40, 250, 40], 100) == ((0, 40), (40, 250), (290, 40))
    assert chunks_of([250, 250], 100) == ((0, 250), (250, 250))


def test_seals_are_counted_apart_from_batches() -> None:
    b = IndexBuilder(chunk_size=100)
    items = [batch(2, 1, 0, b"a"), seal(2, 1, 1), batch(0, 0, 0, b"bb"), batch(0, 0, 1, b""), seal(0, 0, 2)]
    items.append(seal(2, 1, 1))  # a resent seal is the same seal
    for header, raw in items:
        b.add(header, len(raw))
    index = b.build()
    assert index.batches == 3
    assert index.seals == ((0, 0, 2), (2, 1, 1))
    assert index.size == sum(len(raw) for _, raw in items) == b.size
    assert index_of(b"".join(raw for _, raw in items), chunk_size=100) == index


def test_build_does_not_stop_the_builder() -> None:
    b = IndexBuilder(chunk_size=100)
    b.add(sized(60), 60)
    first = b.build()
    b.add(sized(60), 60)
    assert first.chunks == ((0, 60),)
    assert b.build().chunks == ((0, 60), (60, 60))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        IndexBuilder(0)
    b = IndexBuilder()
    with pytest.raises(BadRequest):
        b.add(sized(100), 99)
    with pytest.raises(BadRequest):
        index_of(b"\x00" * 10)  # not whole batches


@settings(max_examples=200, deadline=None, database=None)
@given(sizes=st.lists(st.integers(36, 400), max_size=40), chunk_size=st.integers(1, 1000))
def test_chunks_tile_the_file_greedily(sizes: list[int], chunk_size: int) -> None:
    chunks = chunks_of(sizes, chunk_size)
    boundaries = {0}
    for n in sizes:
        boundaries.add(max(boundaries) + n)
    total = sum(sizes)
    pos = 0
    for i, (off, n) in enumerate(chunks):
        assert off == pos and n > 0
        assert off in boundaries and off + n in boundaries
        inside = [s for s in boundaries if off < s < off + n]
        assert n <= chunk_size or not inside  # only a single batch may exceed the size
        if i + 1 < len(chunks):  # greedy: the next batch would not have fit
            nxt = min(s for s in boundaries if s > off + n)
            assert nxt - off > chunk_size
        pos += n
    assert pos == total


# -- the value types ---------------------------------------------------------------------------------


def test_chunk_index_json_round_trip() -> None:
    index = ChunkIndex(chunks=((0, 10), (10, 5)), batches=3, seals=((0, 1, 2), (3, 0, 1)), size=15)
    assert ChunkIndex.from_json(index.to_json()) == index
    assert index.to_json() == {
        "chunks": [[0, 10], [10, 5]],
        "batches": 3,
        "seals": [[0, 1, 2], [3, 0, 1]],
        "size": 15,
    }


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"chunks": [], "batches": 0, "seals": []},
        {"chunks": [], "batches": 0, "seals": [], "size": 0, "extra": 1},
        {"chunks": [[0, 10]], "batches": 0, "seals": [], "size": 5},
        {"chunks": [[0]], "batches": 0, "seals": [], "size": 5},
        {"chunks": [[0, -1]], "batches": 0, "seals": [], "size": 5},
        {"chunks": "x", "batches": 0, "seals": [], "size": 5},
        {"chunks": [], "batches": -1, "seals": [], "size": 0},
        {"chunks": [], "batches": True, "seals": [], "size": 0},
        {"chunks": [], "batches": 0, "seals": [[1, 2]], "size": 0},
        {"chunks": [], "batches": 0, "seals": [], "size": 1.0},
    ],
)
def test_chunk_index_from_json_rejects_bad_shapes(bad: Any) -> None:
    with pytest.raises(BadRequest):
        ChunkIndex.from_json(bad)


def test_location_key() -> None:
    k = LocationKey("app", 1, 2, 3, CopyRole.REPLICA)
    k.validate()
    assert k.name == "2-3-replica"
    assert LocationKey.from_json(k.to_json()) == k
    assert sorted(
        [k, LocationKey("app", 1, 2, 3, CopyRole.PRIMARY), LocationKey("app", 0, 9, 9, CopyRole.REPLICA)]
    ) == [
        LocationKey("app", 0, 9, 9, CopyRole.REPLICA),
        LocationKey("app", 1, 2, 3, CopyRole.PRIMARY),
        k,
    ]
    with pytest.raises(BadRequest):
        LocationKey.from_json({**k.to_json(), "role": "x"})
    with pytest.raises(BadRequest):
        LocationKey.from_json({"app_id": "app"})
