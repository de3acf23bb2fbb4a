"""Fuzz targets, one per decoder (issue 13): every input is either decoded into a valid
value that encodes again, or refused with the decoder's documented error. Any other
exception, or a hang (the 5 s deadline), fails.

Run long as ``tests/fuzz/budget.py`` says (``CROUPIER_FUZZ_EXAMPLES``, ``--timeout=0``).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier._assemble import CorruptChunk, parse_chunk
from croupier.core.access import Scheme
from croupier.core.batch import BatchHeader
from croupier.core.codec import from_json, to_json
from croupier.core.commands import COMMAND_TYPES, Command, MapperEnd, decode_command, encode_command
from croupier.core.dataplane import CommitFiles, Destroy, FetchChunk, FetchSmall, OpenStream, Push, Replicate
from croupier.core.errors import BadRequest, Unauthorized
from croupier.core.events import EVENT_TYPES, decode_event, encode_event
from croupier.core.wire import HEADER_SIZE, MAGIC, Header, Kind, decode_body, encode_body
from croupier.storage.disk import decode_index, encode_index
from croupier.storage.index import index_of
from croupier.storage.store import LocationKey
from croupier.transports._framing import parse_message, peek_ids
from croupier.transports.auth import AUTH_FLAG, Verifier, sign_request
from croupier.transports.digest import batch_digest
from croupier.transports.secret import ClusterSecret
from tests.fuzz.budget import fuzz_settings, ran
from tests.fuzz.mutate import json_values, mutated, odd_strings

DATAPLANE = (Push, Replicate, CommitFiles, OpenStream, FetchChunk, FetchSmall, Destroy)
_U64 = (1 << 64) - 1


def _assert_encodable(body: dict[str, Any]) -> None:
    """What a server later does with a decoded message: encode it, strictly, as UTF-8."""
    encode_body(body)
    json.dumps(body, ensure_ascii=False).encode("utf-8")


# -- frame header ---------------------------------------------------------------------------

headers = st.builds(
    lambda v, k, t, r, s, f: MAGIC + bytes([v, k]) + t.to_bytes(2, "little") + r.to_bytes(8, "little")
    + s.to_bytes(2, "little") + f.to_bytes(2, "little"),
    st.integers(0, 255), st.integers(0, 255), st.integers(0, 65535), st.integers(0, _U64),
    st.integers(0, 65535), st.integers(0, 65535),
)  # fmt: skip


@fuzz_settings()
@given(
    st.one_of(st.binary(max_size=40), headers, mutated(headers)), st.lists(st.binary(max_size=64), max_size=3)
)
def test_frame_header(frame: bytes, rest: list[bytes]) -> None:
    ran("frame header (core/wire.py Header.decode, _framing.parse_message)")
    try:
        header = Header.decode(frame)
    except BadRequest:
        assert peek_ids(frame) == (0, 0) or (len(frame) == HEADER_SIZE and frame[:4] == MAGIC)
    else:
        assert header.encode() == frame
    try:
        msg = parse_message([memoryview(frame), *(memoryview(r) for r in rest)], Kind.REQUEST)
    except BadRequest:
        return
    assert isinstance(msg.body, dict)


# -- master control messages ----------------------------------------------------------------


def _valid_bodies() -> st.SearchStrategy[bytes]:
    samples = [
        encode_command(cls(**{f.name: _sample(cls, f.name) for f in fields(cls) if _required(f)}))[1]
        for cls in COMMAND_TYPES.values()
    ]
    return st.sampled_from([encode_body(s) for s in samples])


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _sample(cls: type, name: str) -> Any:
    """A valid value for a required command field, by its name (robust to new fields)."""
    if cls is MapperEnd and name == "partitions":
        return "AQ=="  # a bitmap of partition 0 (MAPPER_END declares what it wrote)
    named: dict[str, Any] = {
        "partitions": (0, 1),
        "maps": (0, 1),
        "leader": "tcp://h:1",
        "host": "h",
        "copies": ((0, 0, "primary", 1, "0" * 64),),  # REPORT_OFFLOAD: partition, epoch, role, size, digest
        "ends": ((0, 0, 1, "AQ=="), (1, 0, 1, "AQ==")),  # MAPPER_END_BATCH: map, attempt, touched, bitmap
    }
    if name in named:
        return named[name]
    if name in ("app_id", "worker_id", "incarnation", "name", "reason"):
        return "a"
    return 1


@fuzz_settings()
@given(
    st.sampled_from([*sorted(COMMAND_TYPES), 0, 2, 99, 65535]),
    st.one_of(
        mutated(_valid_bodies()), st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())
    ),
)
def test_control_message(msg_type: int, raw: bytes) -> None:
    ran("control messages (core/wire.py decode_body + core/commands.py decode_command)")
    try:
        cmd = decode_command(msg_type, decode_body(raw))
    except BadRequest:
        return
    assert isinstance(cmd, Command)
    again_type, body = encode_command(cmd)
    _assert_encodable(body)
    assert decode_command(again_type, body) == cmd


@fuzz_settings()
@given(st.sampled_from(sorted(COMMAND_TYPES)), st.data())
def test_control_message_fields(msg_type: int, data: st.DataObject) -> None:
    ran("control message fields (core/commands.py, one odd value per field)")
    cls = COMMAND_TYPES[msg_type]
    body = encode_command(cls(**{f.name: _sample(cls, f.name) for f in fields(cls) if _required(f)}))[1]
    if body:
        body[data.draw(st.sampled_from(sorted(body)))] = data.draw(st.one_of(json_values, odd_strings))
    try:
        cmd = decode_command(msg_type, decode_body(json.dumps(body).encode()))
    except BadRequest:
        return
    _assert_encodable(encode_command(cmd)[1])


# -- worker data-plane messages -------------------------------------------------------------

_LOC = {"app_id": "a", "shuffle_id": 0, "partition": 0, "epoch": 0, "incarnation": "i"}
_DP_SAMPLES: dict[type[Any], dict[str, Any]] = {
    Push: {
        "app_id": "a",
        "shuffle_id": 0,
        "incarnation": "i",
        "batches": [[0, 0]],
        "replica": {"worker_id": "w", "url": "tcp://h:1", "incarnation": "j"},
    },
    Replicate: {"app_id": "a", "shuffle_id": 0, "incarnation": "i", "batches": [[0, 0], [1, 2]]},
    CommitFiles: {"app_id": "a", "shuffle_id": 0},
    OpenStream: {**_LOC, "role": "primary"},
    FetchChunk: {**_LOC, "role": "replica", "chunk": 3},
    FetchSmall: {
        "app_id": "a",
        "shuffle_id": 0,
        "incarnation": "i",
        "locations": [[0, 0, "primary"], [3, 1, "replica"]],
    },
    Destroy: {"app_id": "a", "shuffle_id": None},
}


@fuzz_settings()
@given(st.sampled_from(DATAPLANE), st.data())
def test_dataplane_message(cls: type[Any], data: st.DataObject) -> None:
    ran("worker messages (core/dataplane.py from_json + validate)")
    valid = encode_body(_DP_SAMPLES[cls])
    raw = data.draw(st.one_of(mutated(st.just(valid)), st.binary(max_size=100)))
    body = data.draw(st.one_of(st.just(None), json_values))
    try:
        msg = from_json(cls, decode_body(raw) if body is None else {**_DP_SAMPLES[cls], "app_id": body})
        msg.validate()
    except BadRequest:
        return
    _assert_encodable(to_json(msg))


# -- events ---------------------------------------------------------------------------------

_EVENT_SAMPLES = [
    b'{"e":"AppRegistered","v":1,"app_id":"a","name":"n"}',
    b'{"e":"WorkerLost","v":1,"worker_id":"w","reason":"r"}',
    b'{"e":"MapperEnded","v":1,"app_id":"a","shuffle_id":0,"map_id":1,"attempt_id":0,"touched":2}',
]


@fuzz_settings()
@given(
    st.one_of(
        mutated(st.sampled_from(_EVENT_SAMPLES)),
        st.binary(max_size=200),
        st.builds(
            lambda kind, extra: json.dumps({"e": kind, "v": 1, **extra}).encode(),
            st.sampled_from(sorted(EVENT_TYPES)),
            st.dictionaries(
                st.sampled_from(["app_id", "worker_id", "shuffle_id", "reason", "host"]), json_values
            ),
        ),
    )
)
def test_event(raw: bytes) -> None:
    ran("events (core/events.py decode_event)")
    try:
        event = decode_event(raw)
    except BadRequest:
        return
    assert decode_event(encode_event(event)) == event


# -- batch chunks ---------------------------------------------------------------------------


def _chunk(batches: list[tuple[int, int, int, bytes, bool]]) -> bytes:
    out = []
    for m, a, b, data, seal in batches:
        payload = b"" if seal else data
        out.append(
            BatchHeader(m, a, b, len(payload), int(seal), batch_digest(m, a, b, int(seal), payload)).encode()
            + payload
        )
    return b"".join(out)


chunks = st.lists(
    st.tuples(st.integers(0, 9), st.integers(0, 2), st.integers(0, 9), st.binary(max_size=64), st.booleans()),
    max_size=5,
).map(_chunk)


@fuzz_settings()
@given(st.one_of(mutated(chunks), st.binary(max_size=200)))
def test_batch_chunk(raw: bytes) -> None:
    ran("batch chunks (sdk/_assemble.py parse_chunk)")
    try:
        batches = parse_chunk(raw)
    except CorruptChunk:
        return
    assert sum(36 + h.length for h, _ in batches) == len(raw)


# -- index files ----------------------------------------------------------------------------

KEY = LocationKey("a", 1, 2, 0, "primary")
indexes = st.binary(max_size=300).map(
    lambda data: encode_index(KEY, index_of(_chunk([(0, 0, 0, data, False)]), 64))
)


@fuzz_settings()
@given(
    st.one_of(mutated(indexes), st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()))
)
def test_index_file(raw: bytes) -> None:
    ran("index files (storage/disk.py decode_index)")
    try:
        index = decode_index(raw, KEY)
    except ValueError:
        return
    assert decode_index(encode_index(KEY, index), KEY) == index


@pytest.mark.parametrize("cls", DATAPLANE)
def test_dataplane_samples_are_valid(cls: type[Any]) -> None:
    """The fuzzers start from valid messages: otherwise they would only test refusals."""
    from_json(cls, _DP_SAMPLES[cls]).validate()


@pytest.mark.parametrize("msg_type", sorted(COMMAND_TYPES))
def test_command_samples_are_valid(msg_type: int) -> None:
    cls = COMMAND_TYPES[msg_type]
    decode_command(
        msg_type,
        encode_command(cls(**{f.name: _sample(cls, f.name) for f in fields(cls) if _required(f)}))[1],
    )


# -- auth frames ----------------------------------------------------------------------------

_SECRET = ClusterSecret(bytes(range(32)))
_AUTH_HEADER = Header(Kind.REQUEST, 50, 7, flags=AUTH_FLAG).encode()


def _signed(scheme: int, app_id: str, raw_body: bytes, first: bytes | None) -> bytes:
    key = _SECRET.member_key if scheme == Scheme.MEMBER else _SECRET.app_key(app_id)
    return sign_request(scheme, key, _AUTH_HEADER, raw_body, first)


def _auth_input(scheme: int, app_id: str, first: bytes) -> tuple[bytes, bytes, bytes]:
    """A validly signed request: (raw body, first payload, auth frame)."""
    raw_body = json.dumps({"app_id": app_id}).encode()
    return raw_body, first, _signed(scheme, app_id, raw_body, first)


app_ids = st.one_of(st.just("app-1"), odd_strings.filter(lambda s: s.encode("utf-8", "ignore").decode() == s))
auth_inputs = st.builds(
    _auth_input, st.sampled_from([Scheme.MEMBER, Scheme.APP]), app_ids, st.binary(max_size=64)
)


@fuzz_settings()
@given(
    st.one_of(
        auth_inputs.flatmap(lambda t: st.tuples(st.just(t[0]), st.just(t[1]), mutated(st.just(t[2])))),
        st.tuples(st.binary(max_size=80), st.binary(max_size=64), st.binary(max_size=64)),
    ),
    st.sampled_from(sorted(set(COMMAND_TYPES) | {50, 51, 53, 54, 58})),
)
def test_auth_frame(frames: tuple[bytes, bytes, bytes], msg_type: int) -> None:
    """A server's check of a request's auth frame: a scheme, or ``Unauthorized``, never another error."""
    ran("auth frames (transports/auth.py Verifier.check)")
    raw_body, first, auth = frames
    try:
        body = decode_body(raw_body)
    except BadRequest:
        body = {}
    try:
        scheme = Verifier(_SECRET).check(msg_type, _AUTH_HEADER, body, raw_body, auth, [first])
    except Unauthorized:
        return
    assert scheme in (Scheme.MEMBER, Scheme.APP)
