"""Ids, wire header, command and event codecs: malformed input is a clear BadRequest."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.codec import OMITTED_WHEN_NONE, from_json, to_json
from croupier.core.commands import COMMAND_TYPES, MapperEnd, RegisterShuffle, decode_command, encode_command
from croupier.core.config import parse_duration, parse_size
from croupier.core.enums import WorkerStatus
from croupier.core.errors import (
    BY_STATUS,
    BadRequest,
    CroupierError,
    DataLostError,
    NotLeader,
    error_from_wire,
)
from croupier.core.events import EVENT_TYPES, decode_event
from croupier.core.ids import app_id, int_id, worker_id
from croupier.core.replies import WorkerAddress
from croupier.core.wire import HEADER_SIZE, Header, Kind, decode_body


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "a\\b", "x" * 129, "a b", "é", 5, None])
def test_ids_reject_paths_empty_and_long(bad: object) -> None:
    with pytest.raises(BadRequest):
        app_id(bad)
    with pytest.raises(BadRequest):
        worker_id(bad)


def test_ids_accept_reasonable_names() -> None:
    assert app_id("etl-nightly_2026.11") == "etl-nightly_2026.11"
    assert int_id("partition", 0) == 0
    for bad in (-1, 2**31, True, "3", 1.5):
        with pytest.raises(BadRequest):
            int_id("partition", bad)


def test_header_round_trip_and_rejections() -> None:
    h = Header(Kind.REQUEST, 32, 2**63, 0)
    frame = h.encode()
    assert len(frame) == HEADER_SIZE == 20
    assert Header.decode(frame) == h
    with pytest.raises(BadRequest, match="20 bytes"):
        Header.decode(frame[:10])
    with pytest.raises(BadRequest, match="magic"):
        Header.decode(b"XXXX" + frame[4:])
    with pytest.raises(BadRequest, match="version"):
        Header.decode(frame[:4] + b"\x09" + frame[5:])
    with pytest.raises(BadRequest, match="kind"):
        Header.decode(frame[:5] + b"\x07" + frame[6:])


@given(st.binary(max_size=40))
def test_header_decode_never_crashes(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        Header.decode(data)


@pytest.mark.parametrize("body", [b"\xff\xfe", b"not json", b"[1,2]", b'"s"', b"{" * 100_000])
def test_bad_bodies(body: bytes) -> None:
    with pytest.raises(BadRequest):
        decode_body(body)


def test_commands_round_trip_and_shape_errors() -> None:
    cmd = RegisterShuffle("app1", 3, 10, loads={"w1": 0.5})
    assert decode_command(*encode_command(cmd)) == cmd
    with pytest.raises(BadRequest, match="missing field"):
        decode_command(int(MapperEnd.TYPE), {"app_id": "a"})
    with pytest.raises(BadRequest, match="unknown fields"):
        decode_command(int(MapperEnd.TYPE), {**encode_command(MapperEnd("a", 0, 0, 0, 0, "AA=="))[1], "x": 1})
    with pytest.raises(BadRequest, match="integer"):
        decode_command(
            int(MapperEnd.TYPE), {**encode_command(MapperEnd("a", 0, 0, 0, 0, "AA=="))[1], "map_id": "1"}
        )
    with pytest.raises(BadRequest, match="app_id"):
        decode_command(int(MapperEnd.TYPE), encode_command(MapperEnd("../etc", 0, 0, 0, 0, "AA=="))[1])
    with pytest.raises(BadRequest, match="unknown master message type"):
        decode_command(999, {})


@given(st.sampled_from(sorted(COMMAND_TYPES)), st.dictionaries(st.text(max_size=12), st.from_type(object)))
def test_decode_command_never_crashes(msg_type: int, body: dict[str, object]) -> None:
    with contextlib.suppress(BadRequest):
        decode_command(msg_type, body)


@given(st.binary(max_size=200) | st.sampled_from([b'{"e":"MapperEnded","v":2}', b'{"e":"Nope","v":1}']))
def test_decode_event_never_crashes(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        decode_event(data)


def test_every_event_kind_is_registered() -> None:
    assert len(EVENT_TYPES) == 17  # + MapsRerun (issue 16), CopiesOffloaded (issue 26), MappersEnded (27)


def test_errors_round_trip_through_the_wire() -> None:
    err = NotLeader("not me", {"leader": "tcp://h:1"})
    back = error_from_wire(err.status, err.to_wire())
    assert isinstance(back, NotLeader) and back.leader == "tcp://h:1" and back.retriable
    lost = DataLostError.of([3, 1, 3], ["w2", "w1"], "shuffle a/0")
    assert "[1, 3]" in str(lost) and "w1" in str(lost)
    again = error_from_wire(lost.status, lost.to_wire())
    assert isinstance(again, DataLostError) and again.partitions == [1, 3] and again.workers == ["w1", "w2"]
    assert len({cls.status for cls in BY_STATUS.values()}) == len(BY_STATUS)
    assert isinstance(error_from_wire(999, None), CroupierError)


def test_units() -> None:
    assert parse_size("64MiB") == 64 * 1024**2
    assert parse_size("1GiB") == 1024**3
    assert parse_size("500kB") == 500_000
    assert parse_duration("30s") == 30.0
    assert parse_duration("500ms") == 0.5
    for bad in ("12 parsecs", "abc", ""):
        with pytest.raises(ValueError):
            parse_size(bad)


@dataclasses.dataclass(frozen=True)
class _Tagged:
    status: WorkerStatus
    note: str | None = dataclasses.field(default=None, metadata=OMITTED_WHEN_NONE)
    nested: tuple[WorkerAddress, ...] = ()


def test_codec_enums_omitted_fields_and_nullable_paths() -> None:
    tagged = _Tagged(WorkerStatus.LOST, nested=(WorkerAddress("w9"),))
    encoded = to_json(tagged)
    assert encoded == {"status": "lost", "nested": [{"worker_id": "w9", "status": "removed"}]}
    assert type(encoded["status"]) is str  # a plain string, not the enum member
    assert from_json(_Tagged, encoded) == tagged
    assert from_json(_Tagged, {"status": "active", "note": None}).note is None
    assert to_json(_Tagged(WorkerStatus.ACTIVE, "hi"))["note"] == "hi"
    with pytest.raises(BadRequest, match=r"_Tagged.status: 'gone' is not one of"):
        from_json(_Tagged, {"status": "gone"})
    with pytest.raises(BadRequest, match=r"_Tagged.status: expected a string"):
        from_json(_Tagged, {"status": 1})
    # X | None reports the inner field's path, not the whole value
    with pytest.raises(BadRequest, match=r"_Tagged.nested\[0\].host: expected a string"):
        from_json(_Tagged, {"status": "active", "nested": [{"worker_id": "w", "host": 5}]})


@dataclasses.dataclass(frozen=True)
class _Ends:
    ends: tuple[tuple[int, int, int, str], ...]


@dataclasses.dataclass(frozen=True)
class _Int:
    v: int


@dataclasses.dataclass(frozen=True)
class _Str:
    v: str


_ITEM = st.one_of(
    st.integers(-3, 3), st.booleans(), st.none(), st.floats(0, 1), st.text(max_size=3), st.just("\ud800")
)


@given(st.lists(st.lists(_ITEM, min_size=4, max_size=4), max_size=3))
def test_a_fixed_tuple_of_ints_and_strs_takes_exactly_what_its_items_would(ends: list[list[object]]) -> None:
    """The one-test path of plain fixed tuples (MAPPER_END_BATCH's ends) against each item's own."""

    def item_ok(v: object, kind: type[_Int | _Str]) -> bool:
        with contextlib.suppress(BadRequest):
            from_json(kind, {"v": v})
            return True
        return False

    expected = all(item_ok(v, k) for e in ends for v, k in zip(e, (_Int, _Int, _Int, _Str), strict=True))
    try:
        got = from_json(_Ends, {"ends": ends})
    except BadRequest:
        assert not expected
    else:
        assert expected and got == _Ends(tuple(tuple(e) for e in ends))  # type: ignore[misc]
