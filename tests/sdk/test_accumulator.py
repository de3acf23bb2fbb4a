"""The writer's accumulator: records -> batches, batch ids, big and empty records, seals."""

from __future__ import annotations

import dataclasses
import struct

import blake3
import pytest

from croupier._accumulator import Accumulator, OutBatch, make_batch
from croupier.core.batch import BATCH_HEADER, FLAG_SEAL, iter_records
from croupier.transports.digest import digest_ok


def records_of(batches: list[OutBatch]) -> list[bytes]:
    return [bytes(r) for b in batches for r in iter_records(b.data)]


def spec_digest(batch: OutBatch) -> bytes:
    """PROTOCOL §5.1: blake3 of the header's first 20 bytes, then the data; 16 bytes."""
    return blake3.blake3(batch.encoded_header[:20] + bytes(batch.data)).digest(length=16)


def test_small_records_stay_buffered_until_the_buffer_is_full() -> None:
    acc = Accumulator(2, 1, 4, buffer_size=100)
    out: list[OutBatch] = []
    for _ in range(9):
        out += acc.add(1, b"x" * 6)  # 10 bytes each with the prefix
    assert out == []
    assert acc.buffered == 90
    out += acc.add(1, b"y" * 6)
    assert len(out) == 1 and acc.buffered == 0
    batch = out[0]
    assert batch.partition == 1
    h = batch.header
    assert (h.map_id, h.attempt_id, h.batch_id, h.length, h.flags) == (2, 1, 0, 100, 0)
    assert h.digest == spec_digest(batch)
    assert records_of(out) == [b"x" * 6] * 9 + [b"y" * 6]
    assert batch.size == BATCH_HEADER.size + 100


def test_batch_ids_count_per_partition() -> None:
    acc = Accumulator(0, 0, 3, buffer_size=8)
    out = []
    for _ in range(3):
        out += acc.add(0, b"abcd")
        out += acc.add(2, b"abcd")
    ids = [(b.partition, b.header.batch_id) for b in out]
    assert ids == [(0, 0), (2, 0), (0, 1), (2, 1), (0, 2), (2, 2)]
    assert acc.batch_count(0) == 3 and acc.batch_count(1) == 0


def test_big_record_goes_alone_after_the_partial_buffer() -> None:
    acc = Accumulator(0, 0, 2, buffer_size=64)
    assert acc.add(0, b"small") == []
    big = bytes(range(256)) * 40
    out = acc.add(0, big)
    assert [b.header.batch_id for b in out] == [0, 1]
    assert records_of(out) == [b"small", big]
    assert acc.buffered == 0


def test_ten_mib_record() -> None:
    acc = Accumulator(0, 0, 1)
    big = b"\xab" * (10 * 1024 * 1024)
    (batch,) = acc.add(0, big)
    assert batch.header.length == len(big) + 4
    assert records_of([batch]) == [big]


def test_empty_records_are_records() -> None:
    acc = Accumulator(0, 0, 2, buffer_size=64)
    for _ in range(3):
        acc.add(1, b"")
    (batch,) = acc.flush()
    assert records_of([batch]) == [b"", b"", b""]
    assert acc.touched == [1]


def test_bytes_like_records() -> None:
    acc = Accumulator(0, 0, 1, buffer_size=1024)
    acc.add(0, bytearray(b"ab"))
    acc.add(0, memoryview(b"cd"))
    acc.add(0, memoryview(bytes(8)).cast("I"))  # 2 items of 4 bytes: counted in bytes
    (batch,) = acc.flush()
    assert records_of([batch]) == [b"ab", b"cd", bytes(8)]


def test_bad_arguments() -> None:
    acc = Accumulator(0, 0, 2)
    with pytest.raises(ValueError, match="out of range"):
        acc.add(2, b"x")
    with pytest.raises(ValueError, match="out of range"):
        acc.add(-1, b"x")
    with pytest.raises(TypeError):
        acc.add(0, "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Accumulator(0, 0, 1, buffer_size=0)


def test_seals_count_data_batches_of_each_touched_partition() -> None:
    acc = Accumulator(5, 2, 4, buffer_size=10)
    acc.add(0, b"123456")  # 10 bytes: a batch
    acc.add(0, b"1")
    acc.add(3, b"")
    with pytest.raises(RuntimeError):
        acc.seals()
    flushed = acc.flush()
    assert sorted((b.partition, b.header.batch_id) for b in flushed) == [(0, 1), (3, 0)]
    seals = {b.partition: b for b in acc.seals()}
    assert set(seals) == {0, 3}
    assert seals[0].header.batch_id == 2 and seals[3].header.batch_id == 1
    for seal in seals.values():
        h = seal.header
        assert (h.map_id, h.attempt_id, h.length, h.flags) == (5, 2, 0, FLAG_SEAL)
        assert h.digest == spec_digest(seal) and seal.data == b""


def test_flush_of_an_untouched_writer_is_empty() -> None:
    acc = Accumulator(0, 0, 4)
    assert acc.flush() == [] and acc.seals() == [] and acc.touched == []


def test_memory_limit_cuts_the_largest_buffers() -> None:
    acc = Accumulator(0, 0, 100, buffer_size=1000, memory_limit=2000)
    out: list[OutBatch] = []
    for p in range(10):
        out += acc.add(p, b"z" * (100 + p * 10))
    # 10 buffers of 104..194 bytes: 1490 buffered, under the limit
    assert out == []
    out += acc.add(50, b"w" * 600)  # 2094 > 2000: cut the largest until <= 1000
    assert acc.buffered <= 1000
    assert out and out[0].partition == 50  # the largest first
    assert sum(len(b.data) for b in out) + acc.buffered == 1490 + 604
    # nothing is lost: everything flushed later comes back
    out += acc.flush()
    assert sorted(records_of(out)) == sorted([b"z" * (100 + p * 10) for p in range(10)] + [b"w" * 600])


def test_drop_forgets_buffers() -> None:
    acc = Accumulator(0, 0, 2)
    acc.add(0, b"abc")
    acc.drop()
    assert acc.buffered == 0 and acc.flush() == []


def test_make_batch_seal_refuses_data() -> None:
    with pytest.raises(ValueError):
        make_batch(0, 0, 0, 1, b"x", seal=True)


def test_a_framed_record_is_a_batch_of_its_own_without_a_copy() -> None:
    acc = Accumulator(4, 0, 3, buffer_size=100)
    assert acc.add(1, b"small") == []
    framed = memoryview(bytearray(struct.pack("<I", 6) + b"framed"))
    out = acc.add_framed(1, framed)
    # the partial buffer goes first, to keep the order; then the framed record as it is
    assert [b.header.batch_id for b in out] == [0, 1]
    assert records_of(out) == [b"small", b"framed"]
    assert out[1].data is framed  # not copied
    assert out[1].header.digest == spec_digest(out[1])
    assert acc.add_framed(2, memoryview(struct.pack("<I", 0))) != []  # an empty record
    assert (acc.records, acc.bytes_in) == (3, 11)
    assert acc.touched == [1, 2]
    for bad in (b"", b"\x05\x00\x00\x00abcd", b"\x01\x00\x00\x00ab"):
        with pytest.raises(ValueError, match="framed record"):
            acc.add_framed(0, memoryview(bad))
    with pytest.raises(ValueError, match="out of range"):
        acc.add_framed(3, framed)


def test_the_digest_covers_the_header() -> None:
    batch = make_batch(0, 1, 2, 3, b"\x01\x00\x00\x00z")
    seal = make_batch(0, 1, 2, 4, b"", seal=True)
    assert digest_ok(batch.header, batch.data) and digest_ok(seal.header, seal.data)
    for field in ("map_id", "attempt_id", "batch_id"):
        for b in (batch, seal):
            moved = dataclasses.replace(b.header, **{field: getattr(b.header, field) + 1})
            assert not digest_ok(moved, b.data)
    assert not digest_ok(dataclasses.replace(batch.header, length=4), batch.data)
    assert not digest_ok(batch.header, b"\x01\x00\x00\x00y")


def test_the_seal_digest_of_protocol_5_1() -> None:
    seal = make_batch(0, 1, 0, 2, b"", seal=True)
    assert seal.encoded_header[:20].hex() == "0100000000000000020000000000000001000000"
    assert seal.header.digest.hex() == "25976ed627a17f4099ad6fdee13d5918"


def test_a_keyed_accumulator_keys_every_digest_with_the_app_key() -> None:
    """PROTOCOL §5.1 on a cluster with a secret: blake3 keyed by the app key, data batches,
    framed records and seals alike."""
    key = bytes(range(32))
    acc = Accumulator(2, 1, 4, buffer_size=16, key=key)
    out = acc.add(0, b"x" * 20) + acc.add_framed(1, memoryview(struct.pack("<I", 3) + b"abc"))
    out += acc.add(2, b"y")
    out += acc.flush()
    out += acc.seals()
    assert len(out) == 6 and {b.header.is_seal for b in out} == {True, False}
    for b in out:
        expected = blake3.blake3(b.encoded_header[:20] + bytes(b.data), key=key).digest(length=16)
        assert b.header.digest == expected != spec_digest(b)
        assert digest_ok(b.header, b.data, key) and not digest_ok(b.header, b.data)
