"""The ``<root>/leader`` znode's data: the leading master's RPC URL and term (PROTOCOL.md).

UTF-8 JSON ``{"url": "tcp://host:port", "term": 7}``. The HA leader writes it
(``croupier.ha.leadership``); clients given a ``zk://`` URL read it
(``croupier.transports.master_client``). Both use this one codec.

Usage::

    data = encode_leader("tcp://10.0.0.1:9097", 7)
    record = decode_leader(data)            # LeaderRecord(url="tcp://10.0.0.1:9097", term=7)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["LeaderRecord", "decode_leader", "encode_leader"]


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    """Who leads: ``url`` answers RPCs for ``term``."""

    url: str
    term: int


def encode_leader(url: str, term: int) -> bytes:
    """The znode data for ``url`` leading ``term``."""
    return json.dumps({"url": url, "term": term}).encode()


def decode_leader(data: bytes) -> LeaderRecord:
    """Parse the znode data.

    Raises:
        ValueError: not UTF-8 JSON, not an object, or ``url``/``term`` missing or mistyped.
    """
    try:
        info = json.loads(data)
        url, term = info["url"], info["term"]
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError) as exc:
        raise ValueError(f"malformed leader record {data[:200]!r}: {exc}") from exc
    if not isinstance(url, str) or not url or isinstance(term, bool) or not isinstance(term, int):
        raise ValueError(f"malformed leader record {data[:200]!r}: url must be a string, term an integer")
    return LeaderRecord(url, term)
