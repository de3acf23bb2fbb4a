"""The ``.index`` file of a committed location: its bytes and their checks.


UTF-8 JSON, one object with sorted keys and no whitespace, then ``\\n``::

    {"crc":<u32>,
     "index":{"batches":<int>,"chunks":[[offset,length],...],"seals":[[map_id,attempt_id,count],...],
              "size":<int>},
     "key":{"app_id":<str>,"epoch":<int>,"partition":<int>,"role":"primary"|"replica","shuffle_id":<int>},
     "version":1}

- ``crc`` is ``zlib.crc32`` of the canonical JSON (``sort_keys=True``,
  ``separators=(",", ":")``, ASCII) of the object *without* ``crc``, UTF-8 encoded.
- ``key`` must equal the key that the file's path names.
- ``index.chunks`` are ``(offset, length)`` pairs in file order, cut at batch
  boundaries, tiling ``[0, size)``; ``index.batches`` counts data batches;
  ``index.seals`` holds each distinct seal's ``(map_id, attempt_id, batch_id)``, sorted.
- ``index.size`` must equal the size of the ``.data`` file.

A location is *committed* exactly when its ``.index`` passes all of these
checks. An index that fails one (damaged, from another version, or beside a
missing or wrongly sized ``.data``) is skipped with a warning and the location
counts as not committed; ``create`` for that key then deletes both files.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from croupier.core.errors import BadRequest
from croupier.storage.store import ChunkIndex, LocationKey

__all__ = ["INDEX_VERSION", "decode_index", "encode_index"]

INDEX_VERSION = 1


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_index(key: LocationKey, index: ChunkIndex) -> bytes:
    """The bytes of a ``.index`` file (format in the module docstring)."""
    body = {"version": INDEX_VERSION, "key": key.to_json(), "index": index.to_json()}
    return _canonical({**body, "crc": zlib.crc32(_canonical(body))}) + b"\n"


def decode_index(raw: bytes, key: LocationKey) -> ChunkIndex:
    """Parse and check a ``.index`` file that should belong to ``key``.

    Raises:
        ValueError: the file is not a valid version-1 index for ``key`` (the message says why).
    """
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) != {"version", "key", "index", "crc"}:
        raise ValueError("not an index object")
    if doc["version"] != INDEX_VERSION:
        raise ValueError(f"version {doc['version']!r}, expected {INDEX_VERSION}")
    body = {k: v for k, v in doc.items() if k != "crc"}
    if doc["crc"] != zlib.crc32(_canonical(body)):
        raise ValueError("checksum mismatch")
    try:
        found = LocationKey.from_json(doc["key"])
        index = ChunkIndex.from_json(doc["index"])
    except BadRequest as exc:
        raise ValueError(exc.message) from exc
    if found != key:
        raise ValueError(f"it names {found}, its path names {key}")
    return index
