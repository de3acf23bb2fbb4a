"""A committed location's index record: its bytes and their checks.

A record is one line of an index log (:mod:`croupier.storage.index_log`), or the whole of
an older version's ``.index`` file.

UTF-8 JSON, one object with sorted keys and no whitespace, then ``\\n``::

    {"crc":<u32>,
     "index":{"batches":<int>,"chunks":[[offset,length],...],"seals":[[map_id,attempt_id,count],...],
              "size":<int>},
     "key":{"app_id":<str>,"epoch":<int>,"partition":<int>,"role":"primary"|"replica","shuffle_id":<int>},
     "version":1}

- ``crc`` is ``zlib.crc32`` of the canonical JSON (``sort_keys=True``,
  ``separators=(",", ":")``, ASCII) of the object *without* ``crc``, UTF-8 encoded.
- ``key`` must name a location of the log's shuffle dir (of a ``.index`` file: the key its
  path names).
- ``index.chunks`` are ``(offset, length)`` pairs in file order, cut at batch
  boundaries, tiling ``[0, size)``; ``index.batches`` counts data batches;
  ``index.seals`` holds each distinct seal's ``(map_id, attempt_id, batch_id)``, sorted.
- ``index.size`` must equal the size of the ``.data`` file.

A void record takes back the records before it for its key::

    {"crc":<u32>,"key":{...},"version":1,"void":true}

with ``crc`` computed the same way. What a failed check means for the location:
:mod:`croupier.storage.disk`.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from croupier.core.errors import BadRequest
from croupier.storage.store import ChunkIndex, LocationKey

__all__ = ["INDEX_VERSION", "decode_index", "decode_record", "encode_index", "encode_void"]

INDEX_VERSION = 1


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_index(key: LocationKey, index: ChunkIndex) -> bytes:
    """The bytes of a ``.index`` file (format in the module docstring)."""
    body = {"version": INDEX_VERSION, "key": key.to_json(), "index": index.to_json()}
    return _canonical({**body, "crc": zlib.crc32(_canonical(body))}) + b"\n"


def encode_void(key: LocationKey) -> bytes:
    """A void record: it takes back the records before it for ``key`` (an index log's line)."""
    body = {"version": INDEX_VERSION, "key": key.to_json(), "void": True}
    return _canonical({**body, "crc": zlib.crc32(_canonical(body))}) + b"\n"


def decode_record(raw: bytes) -> tuple[LocationKey, ChunkIndex | None]:
    """Parse and check one line of an index log: an index (``encode_index``) or a void
    record (``encode_void``, returned as ``None``), and the key it names.

    Raises:
        ValueError: the line is neither (the message says why).
    """
    doc = _checked(raw, ({"version", "key", "index", "crc"}, {"version", "key", "void", "crc"}))
    if "void" in doc and doc["void"] is not True:
        raise ValueError("a void record's void is not true")
    try:
        found = LocationKey.from_json(doc["key"])
        index = ChunkIndex.from_json(doc["index"]) if "index" in doc else None
    except BadRequest as exc:
        raise ValueError(exc.message) from exc
    return found, index


def _checked(raw: bytes, shapes: tuple[set[str], ...]) -> dict[str, Any]:
    """The JSON object of ``raw`` once its shape, version and checksum hold."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) not in shapes:
        raise ValueError("not an index object")
    if doc["version"] != INDEX_VERSION:
        raise ValueError(f"version {doc['version']!r}, expected {INDEX_VERSION}")
    body = {k: v for k, v in doc.items() if k != "crc"}
    if doc["crc"] != zlib.crc32(_canonical(body)):
        raise ValueError("checksum mismatch")
    return doc


def decode_index(raw: bytes, key: LocationKey) -> ChunkIndex:
    """Parse and check a ``.index`` file that should belong to ``key``.

    Raises:
        ValueError: the file is not a valid version-1 index for ``key`` (the message says why).
    """
    doc = _checked(raw, ({"version", "key", "index", "crc"},))
    try:
        found = LocationKey.from_json(doc["key"])
        index = ChunkIndex.from_json(doc["index"])
    except BadRequest as exc:
        raise ValueError(exc.message) from exc
    if found != key:
        raise ValueError(f"it names {found}, its path names {key}")
    return index
