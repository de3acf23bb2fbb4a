"""Hypothesis strategies for fuzzing decoders: random bytes, valid inputs mutated, odd JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["json_values", "mutated", "odd_strings"]

# Strings that have broken servers or that sit on a boundary: lone surrogates, NUL,
# non-ASCII, very long, path-like, URL-like.
odd_strings = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "\ud800",
            "a\udfff",
            "\x00",
            "é",
            "..",
            "../x",
            "tcp://h:1",
            "tcp://\ud800:1",
            "zk://h:1/r",
            "x" * 2000,
        ]
    ),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    odd_strings,
)
json_values: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(odd_strings, st.just("app_id")), inner, max_size=5),
    ),
    max_leaves=20,
)


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid input with a few random edits: flip, insert, delete, truncate or splice."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        pos = draw(st.integers(0, len(data))) if data else 0
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        elif op == "splice":
            data[pos:pos] = json.dumps(draw(json_values)).encode()
    return bytes(data)
