"""The ``<root>/leader`` record codec, shared by the HA leader and the client's leader lookup."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.leader_record import LeaderRecord, decode_leader, encode_leader


def test_the_bytes_are_the_documented_json() -> None:
    # PROTOCOL.md: <root>/leader holds JSON {"url": "tcp://host:port", "term": int}
    assert encode_leader("tcp://10.0.0.1:9097", 7) == b'{"url": "tcp://10.0.0.1:9097", "term": 7}'


@given(st.text(min_size=1), st.integers(0, 2**62))
def test_decode_inverts_encode(url: str, term: int) -> None:
    assert decode_leader(encode_leader(url, term)) == LeaderRecord(url, term)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        b"[]",
        b"{}",
        b'{"url": "tcp://h:1"}',
        b'{"term": 1}',
        b'{"url": 5, "term": 1}',
        b'{"url": "", "term": 1}',
        b'{"url": "tcp://h:1", "term": "1"}',
        b'{"url": "tcp://h:1", "term": true}',
    ],
)
def test_malformed_records_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="malformed leader record"):
        decode_leader(data)
