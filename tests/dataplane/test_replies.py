"""The worker replies of ``core/dataplane.py``: their JSON is PROTOCOL.md §5.2's, and a
malformed one is a ``BadRequest`` on the side that reads it."""

from __future__ import annotations

import json

import pytest

from croupier.core.codec import from_json
from croupier.core.dataplane import (
    CommitFilesReply,
    DestroyReply,
    FetchChunkReply,
    LocationReport,
    OpenStreamReply,
    WorkerInfoReply,
    WorkerReply,
    encode_reply,
)
from croupier.core.errors import BadRequest

COMMITTED = LocationReport(4, 1, "replica", ok=True, bytes=80, batches=2, chunks=1, seals=((0, 1, 2),))
FAILED = LocationReport.failed(5, 0, "primary", "disk full")


@pytest.mark.parametrize(
    ("reply", "wire"),
    [
        (
            CommitFilesReply("inc", (COMMITTED, FAILED)),
            '{"incarnation": "inc", "locations": ['
            '{"partition": 4, "epoch": 1, "role": "replica", "ok": true, "bytes": 80, "batches": 2,'
            ' "chunks": 1, "seals": [[0, 1, 2]]}, '
            '{"partition": 5, "epoch": 0, "role": "primary", "ok": false, "error": "disk full"}]}',
        ),
        (
            OpenStreamReply(((0, 10), (10, 5)), 15, 3),
            '{"chunks": [[0, 10], [10, 5]], "bytes": 15, "batches": 3}',
        ),
        (FetchChunkReply(10, 5), '{"offset": 10, "length": 5}'),
        (DestroyReply(2), '{"removed": 2}'),
        (
            WorkerInfoReply("w-1", "inc", {"push": "tcp://h:1"}, 3, 10, 20, 100, 1, 0.5, 0.0),
            '{"worker_id": "w-1", "incarnation": "inc", "urls": {"push": "tcp://h:1"}, "live_locations": 3,'
            ' "memory_used": 10, "memory_peak": 20, "memory_cap": 100, "congested": 1,'
            ' "disk_util": 0.5, "io_wait": 0.0}',
        ),
    ],
)
def test_a_reply_is_the_documented_json_and_reads_back(reply: WorkerReply, wire: str) -> None:
    body = encode_reply(reply)
    assert json.dumps(body) == wire
    assert from_json(type(reply), json.loads(wire)) == reply


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (OpenStreamReply, {"chunks": [[0]], "bytes": 1, "batches": 1}),
        (FetchChunkReply, {"offset": 0}),
        (DestroyReply, {"removed": "2"}),
        (
            CommitFilesReply,
            {"incarnation": "i", "locations": [{"partition": 1, "epoch": 0, "role": "primary"}]},
        ),
        (CommitFilesReply, {"incarnation": "i", "locations": [], "extra": 1}),
    ],
)
def test_a_malformed_reply_is_a_bad_request(cls: type[WorkerReply], body: dict[str, object]) -> None:
    with pytest.raises(BadRequest):
        from_json(cls, body)
