"""``croupier.engine``'s stable key partitioning and record encoding (no processes)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from croupier.engine import _dump_record, partition_of


def test_equal_keys_land_in_the_same_partition() -> None:
    for n in (1, 2, 7, 64):
        assert partition_of(1, n) == partition_of(True, n) == partition_of(1.0, n)
        assert partition_of(0, n) == partition_of(False, n) == partition_of(-0.0, n)
        assert partition_of((1, "a"), n) == partition_of((1.0, "a"), n)


def test_partitions_are_in_range_and_spread() -> None:
    parts = [partition_of(f"word{i}", 16) for i in range(2000)]
    assert set(parts) == set(range(16))


def test_the_partition_of_a_key_is_the_same_in_another_process() -> None:
    keys = ["word", b"bytes", 12345678901234567890, 2.5, None, ("nested", (1, b"x")), "ünïcode"]
    here = [partition_of(k, 97) for k in keys]
    code = f"from croupier.engine import partition_of; print([partition_of(k, 97) for k in {keys!r}])"
    # a different PYTHONHASHSEED: str hashes differ there, these partitions must not
    env = {"PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    assert out.stdout.strip() == repr(here)


def test_distinct_keys_are_encoded_apart() -> None:
    # length prefixes: ("ab", "c") and ("a", "bc") are different keys with different bytes
    from croupier.engine import _encode_key

    def enc(key: object) -> bytes:
        out = bytearray()
        _encode_key(key, out)
        return bytes(out)

    assert enc(("ab", "c")) != enc(("a", "bc"))
    assert enc("1") != enc(1) != enc(b"1")
    assert enc(1.5) != enc(1)


@pytest.mark.parametrize("key", [[1, 2], {"a": 1}, object(), 1 + 2j, bytearray(b"x")])
def test_an_unsupported_key_type_is_a_type_error_naming_it(key: object) -> None:
    with pytest.raises(TypeError, match=type(key).__name__):
        partition_of(key, 4)


def test_records_are_plain_pickle_unless_a_value_needs_cloudpickle() -> None:
    plain = _dump_record("k", [1, 2.0, "three"])
    assert pickle.loads(plain) == ("k", [1, 2.0, "three"])
    assert b"cloudpickle" not in plain
    shipped = _dump_record("k", lambda x: x + 1)  # pickle cannot take a lambda
    key, fn = pickle.loads(shipped)
    assert key == "k"
    assert fn(1) == 2
