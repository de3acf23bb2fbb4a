"""Batch digests keyed by the app key (PROTOCOL §5.1): the pinned test vectors, that a
digest made without the key (or with another) fails, and the workers' key cache."""

from __future__ import annotations

import struct

import blake3
import pytest

from croupier.core.batch import FLAG_SEAL, BatchHeader
from croupier.transports.digest import AppKeys, batch_digest, digest_ok
from croupier.transports.secret import ClusterSecret

KEY = bytes(range(32))  # 00 01 .. 1f: the key of PROTOCOL §5.1's examples
OTHER = bytes(32)


def test_the_keyed_data_batch_vector() -> None:
    # map 1, attempt 0, batch 0, 5 bytes "hello", flags 0
    assert batch_digest(1, 0, 0, 0, b"hello", KEY).hex() == "ef8d8339b775fd5d9a5d70f0a8fe9159"
    covered = bytes.fromhex("01000000 00000000 00000000 05000000 00000000")
    assert blake3.blake3(covered + b"hello", key=KEY).digest(length=16).hex() == (
        "ef8d8339b775fd5d9a5d70f0a8fe9159"
    )


def test_the_keyed_seal_vector_and_the_unkeyed_one_stays() -> None:
    assert batch_digest(1, 0, 2, FLAG_SEAL, b"", KEY).hex() == "59eef1f9594c6c279fd7b194f44c82da"
    assert batch_digest(1, 0, 2, FLAG_SEAL, b"").hex() == "25976ed627a17f4099ad6fdee13d5918"
    assert batch_digest(1, 0, 2, FLAG_SEAL, b"", None) == batch_digest(1, 0, 2, FLAG_SEAL, b"")


@pytest.mark.parametrize(
    "size", [0, 1, 16 * 1024 - 21, 16 * 1024, 32 * 1024, 32 * 1024 + 1, 64 * 1024, 256 * 1024 + 1, 600 * 1024]
)
def test_keyed_is_blake3_keyed_over_header_and_data_at_every_size(size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    covered = struct.pack("<IIIII", 3, 4, 5, size, 0)
    expected = blake3.blake3(covered + data, key=KEY).digest(length=16)
    assert batch_digest(3, 4, 5, 0, data, KEY) == expected
    assert batch_digest(3, 4, 5, 0, memoryview(data), KEY) == expected
    assert batch_digest(3, 4, 5, 0, bytearray(data)) == blake3.blake3(covered + data).digest(length=16)


def test_a_digest_made_without_the_key_or_with_another_fails_the_keyed_check() -> None:
    data = b"forged record"
    for made_with in (None, OTHER):
        header = BatchHeader(0, 0, 0, len(data), 0, batch_digest(0, 0, 0, 0, data, made_with))
        assert not digest_ok(header, data, KEY)
    good = BatchHeader(0, 0, 0, len(data), 0, batch_digest(0, 0, 0, 0, data, KEY))
    assert digest_ok(good, data, KEY)
    assert not digest_ok(good, data)  # nor does a keyed batch pass an unkeyed check


def test_app_keys_are_the_secrets_and_cached() -> None:
    secret = ClusterSecret(bytes(range(32)))
    keys = AppKeys(secret, capacity=2)
    assert keys.get("app-1") == secret.app_key("app-1")
    assert keys.get("app-1") is keys.get("app-1")  # cached
    for i in range(5):  # bounded: older apps are derived again
        assert keys.get(f"app-{i}") == secret.app_key(f"app-{i}")
    assert AppKeys(None).get("app-1") is None
    assert "keyed" in repr(keys) and secret.raw.hex() not in repr(keys)
