"""The reader's pure logic: chunk parsing, digests, winners, dedup, completeness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier._accumulator import Accumulator, OutBatch, make_batch
from croupier._assemble import BatchSelector, CorruptChunk, parse_chunk, select_records, split_records
from croupier.core.batch import BATCH_HEADER, iter_records, pack_record
from croupier.core.errors import DataLostError


def chunk(*batches: OutBatch) -> bytes:
    return b"".join(b.encoded_header + b.data for b in batches)


def data(*records: bytes) -> bytes:
    return b"".join(pack_record(r) + r for r in records)


def batch(m: int, a: int, b: int, *records: bytes, partition: int = 0) -> OutBatch:
    return make_batch(partition, m, a, b, data(*records))


def seal(m: int, a: int, count: int) -> OutBatch:
    return make_batch(0, m, a, count, b"", seal=True)


def test_a_keyed_reader_drops_a_batch_made_without_its_app_key() -> None:
    """PROTOCOL §5.1: on a cluster with a secret, a batch whose digest is not keyed by the app key
    (unkeyed, or another key) fails like a corrupt one: the reader reads the other copy."""
    key, other = bytes(range(32)), bytes(32)
    real = make_batch(0, 0, 0, 0, data(b"real"), key=key)
    assert [h.batch_id for h, _ in parse_chunk(chunk(real), key=key)] == [0]
    assert select_records([0], [chunk(real, make_batch(0, 0, 0, 1, b"", seal=True, key=key))], key=key) == [
        b"real"
    ]
    for made_with in (None, other):
        forged = make_batch(0, 0, 0, 0, data(b"injected"), key=made_with)
        with pytest.raises(CorruptChunk, match="digest mismatch"):
            parse_chunk(chunk(forged), key=key)
    with pytest.raises(CorruptChunk):
        parse_chunk(chunk(real))  # and a keyed batch is not read as unkeyed


def test_round_trip_of_one_map() -> None:
    c = chunk(batch(0, 0, 0, b"a", b"b"), batch(0, 0, 1, b""), seal(0, 0, 2))
    assert select_records([0], [c]) == [b"a", b"b", b""]


def test_parse_chunk_verifies_digests() -> None:
    good = chunk(batch(0, 0, 0, b"hello"))
    assert [h.batch_id for h, _ in parse_chunk(good)] == [0]
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptChunk, match="digest"):
        parse_chunk(bytes(bad))


def test_parse_chunk_rejects_truncation_and_bad_flags() -> None:
    good = chunk(batch(0, 0, 0, b"hello"))
    with pytest.raises(CorruptChunk, match="malformed"):
        parse_chunk(good[:-1])
    with pytest.raises(CorruptChunk, match="malformed"):
        parse_chunk(good[:20])
    flagged = bytearray(good)
    flagged[16] = 0x80  # unknown flag bit
    with pytest.raises(CorruptChunk):
        parse_chunk(bytes(flagged))


def test_split_records_rejects_a_cut_record() -> None:
    with pytest.raises(CorruptChunk):
        split_records(data(b"abc")[:-1])


def test_losers_are_dropped() -> None:
    c = chunk(
        batch(1, 0, 0, b"loser"),
        seal(1, 0, 1),
        batch(1, 1, 0, b"winner"),
        seal(1, 1, 1),
        batch(0, 0, 0, b"m0"),
        seal(0, 0, 1),
    )
    assert select_records([0, 1], [c]) == [b"winner", b"m0"]


def test_duplicates_across_epochs_are_dropped() -> None:
    epoch0 = chunk(batch(0, 0, 0, b"r0"), batch(0, 0, 1, b"r1"), seal(0, 0, 3))
    epoch1 = chunk(batch(0, 0, 1, b"r1"), batch(0, 0, 2, b"r2"), seal(0, 0, 3))
    selector = BatchSelector([0])
    assert select_records([0], [epoch0, epoch1]) == [b"r0", b"r1", b"r2"]
    for h, _ in parse_chunk(epoch0 + epoch1):
        selector.offer(h)
    assert (selector.kept, selector.duplicates) == (3, 1)


def test_missing_batch_is_data_lost() -> None:
    c = chunk(batch(0, 0, 0, b"r0"), batch(0, 0, 2, b"r2"), seal(0, 0, 3))
    with pytest.raises(DataLostError) as info:
        select_records([0], [c], partition=7, workers=["w1", "w2"])
    assert info.value.partitions == [7]
    assert info.value.workers == ["w1", "w2"]
    assert "1 of 3 batches missing (1)" in info.value.message


def test_data_without_seal_is_incomplete() -> None:
    with pytest.raises(DataLostError, match="no seal"):
        select_records([0], [chunk(batch(0, 0, 0, b"r0"))], partition=1)


def test_a_losers_missing_batches_do_not_matter() -> None:
    c = chunk(batch(0, 1, 5, b"x"), seal(0, 1, 9), batch(0, 0, 0, b"ok"), seal(0, 0, 1))
    assert select_records([0], [c]) == [b"ok"]


def test_empty_partition_and_seal_only() -> None:
    assert select_records([0, 0], []) == []
    assert select_records([0], [chunk(seal(0, 0, 0))]) == []


def test_unknown_map_or_unended_map_is_dropped() -> None:
    c = chunk(batch(3, 0, 0, b"x"), batch(0, 0, 0, b"y"))
    assert select_records([-1], [c]) == []


def test_conflicting_seals_are_reported() -> None:
    c = chunk(batch(0, 0, 0, b"x"), seal(0, 0, 1), seal(0, 0, 2))
    with pytest.raises(DataLostError, match="sealed with 1 and 2"):
        select_records([0], [c])


def test_batches_beyond_the_seal_are_reported() -> None:
    c = chunk(batch(0, 0, 0, b"x"), batch(0, 0, 1, b"y"), seal(0, 0, 1))
    with pytest.raises(DataLostError, match="beyond its seal"):
        select_records([0], [c])


def test_is_new_does_not_change_state() -> None:
    selector = BatchSelector([0])
    h = batch(0, 0, 0, b"x").header
    assert selector.is_new(h) and selector.is_new(h)
    assert selector.offer(h)
    assert not selector.is_new(h) and not selector.offer(h)
    assert not selector.is_new(seal(0, 0, 1).header)


records_st = st.lists(st.binary(max_size=300), max_size=40)


@settings(max_examples=100, deadline=None)
@given(records_st, st.integers(min_value=5, max_value=400))
def test_pack_and_iter_records_round_trip(records: list[bytes], buffer_size: int) -> None:
    acc = Accumulator(0, 0, 1, buffer_size=buffer_size)
    batches = [b for r in records for b in acc.add(0, r)] + acc.flush()
    assert [bytes(r) for b in batches for r in iter_records(b.data)] == records
    assert [b.header.batch_id for b in batches] == list(range(len(batches)))
    assert all(len(b.data) + BATCH_HEADER.size == b.size for b in batches)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(records_st, min_size=1, max_size=4),
    st.data(),
)
def test_any_epoch_split_with_duplicates_reads_each_record_once(
    maps: list[list[bytes]], draw: st.DataObject
) -> None:
    """Batches spread over epochs (with resends duplicated) read back as exactly the records written."""
    everything: list[OutBatch] = []
    for m, records in enumerate(maps):
        acc = Accumulator(m, 0, 1, buffer_size=64)
        for r in records:
            everything += acc.add(0, r)
        everything += acc.flush() + acc.seals()
    # duplicate some batches (a revive resends them) and cut the stream into epoch chunks
    dups = draw.draw(st.lists(st.sampled_from(everything), max_size=5)) if everything else []
    stream = everything + dups
    order = draw.draw(st.permutations(range(len(stream))))
    shuffled = [stream[i] for i in order]
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(shuffled)), max_size=3)))
    chunks = [chunk(*shuffled[a:b]) for a, b in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
    got = select_records([0] * len(maps), chunks)
    assert sorted(got) == sorted(r for records in maps for r in records)


def test_parse_chunk_with_a_damage_list_skips_only_the_bad_batch() -> None:
    # issue 22 §3.13: one bad digest no longer costs the batches after it
    raws = [chunk(batch(m, 0, 0, f"records of map {m}".encode())) for m in range(3)]
    bad = bytearray(raws[0])
    bad[-1] ^= 0xFF
    damage: list[str] = []
    kept = parse_chunk(bytes(bad) + raws[1] + raws[2], damage=damage)
    assert [h.map_id for h, _ in kept] == [1, 2]
    assert len(damage) == 1 and "map 0 attempt 0 batch 0" in damage[0]
    damage.clear()  # a malformed rest of the chunk ends it, keeping what came before
    assert [h.map_id for h, _ in parse_chunk(raws[1] + raws[2][:-1], damage=damage)] == [1]
    assert len(damage) == 1 and "malformed" in damage[0]
