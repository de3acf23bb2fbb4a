"""MAPPER_END_BATCH decided as its MAPPER_ENDs one after the other, logged as ``MappersEnded``s."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.codec import to_json
from croupier.core.decide import decide
from croupier.core.errors import CroupierError
from croupier.core.events import MappersEnded, decode_event, encode_event
from croupier.core.map_ends import ENDS_EVENT_CHARS
from croupier.core.state import InvalidEvent, MasterState, apply
from tests.core.strategies import mapper_end_batch, scenarios
from tests.core.test_fold_properties import fold, run


def _decided(state: MasterState, cmd: c.Command) -> tuple[Any, list[Any]]:
    reply, events = decide(state, cmd, 0.0, random.Random(0))
    for event in events:
        apply(state, event)
    return to_json(reply), events


def _one_by_one(state: MasterState, batch: c.MapperEndBatch) -> list[Any]:
    """Each entry's MAPPER_END decided and folded in turn: its reply, or its error's slot."""
    out: list[Any] = []
    for end in batch.commands():
        try:
            out.append(_decided(state, end)[0])
        except CroupierError as exc:
            out.append({"error": {"status": exc.status, **exc.to_wire()}})
    return out


batches = st.one_of(
    mapper_end_batch(st.just("a0"), st.just(0), st.integers(0, 2), st.integers(0, 4)),
    mapper_end_batch(
        st.sampled_from(["a0", "a1", "a9"]), st.integers(0, 2), st.integers(0, 3), st.integers(0, 8)
    ),
)


@settings(max_examples=300, deadline=None)
@given(scenarios, st.integers(0, 2**32), batches)
def test_a_batch_is_decided_as_its_mapper_ends_one_after_the_other(
    cmds: list[c.Command], seed: int, batch: c.MapperEndBatch
) -> None:
    singles, log = run(cmds, seed)
    batched = fold(log)
    expected = _one_by_one(singles, batch)
    reply, events = _decided(batched, batch)
    assert reply == {"results": expected}
    assert all(type(e) is MappersEnded for e in events)
    assert batched.to_json()["shuffles"] == singles.to_json()["shuffles"]  # the same winners, bitmaps, runs
    # and the log's records replay to it
    replayed = fold(log)
    for event in events:
        apply(replayed, decode_event(encode_event(event)))
    assert replayed.to_json()["shuffles"] == batched.to_json()["shuffles"]


def _state(num_mappers: int, num_partitions: int) -> MasterState:
    state = MasterState()
    for cmd in (
        c.RegisterWorker("w0", "h0", 1, 2, 3, 4, 2_000_000, "i1"),
        c.RegisterApp("job", "a0"),
        c.RegisterShuffle("a0", num_mappers, num_partitions, replicate=False, shuffle_id=0),
    ):
        _decided(state, cmd)
    return state


def test_a_batch_logs_its_winners_as_one_event() -> None:
    state = _state(4, 4)
    two = encode_bitmap(from_partitions([0, 2], 4))
    ends = ((0, 0, 2, two), (1, 0, 2, two), (0, 1, 2, two), (9, 0, 2, two), (1, 0, 2, two))
    reply, events = _decided(state, c.MapperEndBatch("a0", 0, ends))
    assert events == [MappersEnded("a0", 0, ((0, 0, 2, two), (1, 0, 2, two)))]
    assert [r.get("won") for r in reply["results"]] == [True, True, False, None, True]
    assert reply["results"][3]["error"]["code"] == "BAD_REQUEST"
    # a repeat of the whole batch logs nothing and answers the same
    assert _decided(state, c.MapperEndBatch("a0", 0, ends)) == (reply, [])


def test_the_last_entry_to_end_its_shuffle_says_so() -> None:
    state = _state(2, 1)
    one = encode_bitmap(from_partitions([0], 1))
    reply, _ = _decided(state, c.MapperEndBatch("a0", 0, ((0, 0, 1, one), (0, 3, 1, one), (1, 0, 1, one))))
    assert [r["all_ended"] for r in reply["results"]] == [False, False, True]


def test_winners_whose_bitmaps_are_large_are_split_into_events_within_the_bound() -> None:
    partitions = 1_000_000
    state = _state(8, partitions)
    full = encode_bitmap(from_partitions(range(partitions), partitions))  # ~167 KB of base64
    ends = tuple((m, 0, partitions, full) for m in range(4))
    _, events = _decided(state, c.MapperEndBatch("a0", 0, ends))
    assert [len(e.ends) for e in events] == [1, 1, 1, 1]  # two would pass ENDS_EVENT_CHARS
    assert all(sum(len(end[3]) for end in e.ends) <= ENDS_EVENT_CHARS for e in events)
    small = encode_bitmap(from_partitions([5], 1000))
    _, events = _decided(
        _state(4, 1000), c.MapperEndBatch("a0", 0, tuple((m, 0, 1, small) for m in range(4)))
    )
    assert [len(e.ends) for e in events] == [4]


@pytest.mark.parametrize(
    ("ends", "match"),
    [
        ((), "names no map"),
        (((0, 0, 1, "AQ=="), (0, 1, 1, "AQ==")), "already has a winning attempt"),
        (((1, 0, 1, "AQ=="), (7, 0, 1, "AQ==")), "out of range"),
        (((1, 0, 2, "AQ=="),), "MappersEnded for map 1"),
    ],
)
def test_a_mappers_ended_that_does_not_fit_is_rejected_whole(ends: tuple[Any, ...], match: str) -> None:
    state = _state(2, 4)
    before = state.to_json()
    with pytest.raises(InvalidEvent, match=match):
        apply(state, MappersEnded("a0", 0, ends))
    assert state.to_json() == before


def test_a_mappers_ended_round_trips_the_log_codec() -> None:
    event = MappersEnded("a0", 3, ((0, 1, 2, "Aw=="), (5, 0, 0, "AA==")))
    data = encode_event(event)
    assert data.startswith(b'{"e":"MappersEnded","v":1,')
    assert decode_event(data) == event
