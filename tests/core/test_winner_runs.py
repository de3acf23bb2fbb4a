"""Locations replies carry the winners as runs (issue 13): their size follows the exceptions
(maps whose winning attempt differs from their neighbours', maps not ended), never
``num_mappers``; the runs round-trip to the same winner for every map, whatever the order
the maps ended in, and a snapshot's fresh state answers byte for byte the same."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core import commands as c
from croupier.core.bitmap import decode_bitmap, encode_bitmap, from_partitions
from croupier.core.codec import from_json, to_json
from croupier.core.commands import MAX_MAPPERS, MAX_PARTITIONS_PER_CALL
from croupier.core.decide import decide
from croupier.core.events import MapperEnded
from croupier.core.proof import WinnerRuns, prove, runs_of
from croupier.core.replies import LocationsBatchReply, LocationsReply, ShuffleSummary, StatusReply
from croupier.core.runs import RunCache
from croupier.core.state import MasterState, ShuffleInfo, apply
from croupier.core.wire import encode_body

# per map: its winning attempt (None: not ended), mostly 0 as in a healthy job
attempts = st.one_of(st.none(), st.just(0), st.just(0), st.integers(0, 3), st.just(2**31 - 1))


def expected_runs(winners: list[int | None]) -> list[tuple[int, int, int]]:
    return list(runs_of([-1 if a is None else a for a in winners]))


@settings(max_examples=300, deadline=None)
@given(st.lists(attempts, min_size=1, max_size=300), st.randoms(use_true_random=False), st.data())
def test_runs_kept_in_any_order_round_trip_to_every_maps_winner(
    winners: list[int | None], rnd: random.Random, data: st.DataObject
) -> None:
    ended = [(m, a) for m, a in enumerate(winners) if a is not None]
    rnd.shuffle(ended)
    cache: RunCache[int] = RunCache()
    for m, a in ended:
        cache.add(m, a)
        if data.draw(st.booleans()):  # a reply asks in between
            assert cache.runs() is not None
    runs = cache.runs()
    assert runs is not None and list(runs) == expected_runs(winners)
    # maximal: adjacent runs never share an attempt
    assert all(not (x[1] == y[0] and x[2] == y[2]) for x, y in itertools.pairwise(runs))
    lookup = WinnerRuns(runs, len(winners))
    assert [lookup[m] for m in range(len(winners))] == [-1 if a is None else a for a in winners]
    assert lookup.ended == len(ended) and len(lookup) == len(winners)
    assert list(lookup) == [-1 if a is None else a for a in winners]
    with pytest.raises(IndexError):
        lookup[len(winners)]


def test_maps_ending_in_random_order_merge_past_the_pending_threshold() -> None:
    n = 20_000
    rnd = random.Random(5)
    winners = [rnd.choice((0, 0, 0, 1)) for _ in range(n)]
    order = list(range(n))
    rnd.shuffle(order)
    cache: RunCache[int] = RunCache()
    for m in order:
        cache.add(m, winners[m])
    assert cache.runs() == runs_of(winners)
    capped: RunCache[int] = RunCache(cap=10)
    for m in order:
        capped.add(m, winners[m])
    assert capped.runs() is None  # gave up: callers fall back to the scan


@pytest.mark.parametrize("bad", [[[0, 0, 0]], [[0, 3, 0]], [[1, 2, 0], [0, 1, 0]], [[0, 1, -1]], [[0, 1]]])
def test_malformed_runs_are_a_malformed_reply(bad: list[list[int]]) -> None:
    with pytest.raises(ValueError, match="winner run"):
        WinnerRuns(bad, 2)


def test_prove_reads_the_runs_like_the_list() -> None:
    winners = [0, 1, -1, 0]
    batches = [(0, 0, 0), (1, 1, 0), (1, 0, 0), (3, 0, 0)]
    seals = [(0, 0, 1), (1, 1, 1), (3, 0, 1)]
    for form in (winners, WinnerRuns.of(winners)):
        verdict = prove(7, form, batches, seals, [[0, 4]])
        assert [(x.map_id, x.reason) for x in verdict.missing] == [(2, "no winning attempt")]


def bits(num_partitions: int, *partitions: int) -> str:
    return encode_bitmap(from_partitions(partitions, num_partitions))


def shuffle_state(num_mappers: int, num_partitions: int = 4) -> MasterState:
    state = MasterState()
    rng = random.Random(1)
    for cmd in (
        c.RegisterWorker("w0", "h0", 1, 2, 3, 4, 100, "i0"),
        c.RegisterWorker("w1", "h1", 1, 2, 3, 4, 100, "i1"),
        c.RegisterApp("job", "app"),
        c.RegisterShuffle("app", num_mappers, num_partitions, shuffle_id=0),
    ):
        for event in decide(state, cmd, 0.0, rng)[1]:
            apply(state, event)
    return state


def end(state: MasterState, m: int, attempt: int, partitions: str) -> None:
    """Fold map ``m``'s MapperEnded, as the master logs it."""
    touched = int.from_bytes(decode_bitmap(partitions), "little").bit_count()
    apply(state, MapperEnded("app", 0, m, attempt, touched, partitions))


def reply_bytes(state: MasterState, cmd: c.Command) -> int:
    return len(encode_body(to_json(decide(state, cmd, 0.0, random.Random(0))[0])))


def test_a_reply_of_the_largest_shuffle_does_not_grow_with_num_mappers() -> None:
    """Regression (issue 13): the reply listed one winner per map, -1 while not ended (30 MB)."""
    state = shuffle_state(MAX_MAPPERS)
    for m, attempt in ((0, 0), (1, 0), (5, 3), (MAX_MAPPERS - 1, 1)):
        end(state, m, attempt, bits(4, 0, 2))
    get = c.GetLocations("app", 0, 2)
    assert reply_bytes(state, get) < 2_000
    batch = c.GetLocationsBatch("app", 0, (0, 1, 2, 3))
    assert reply_bytes(state, batch) < 4_000
    reply = decide(state, get, 0.0, random.Random(0))[0]
    assert isinstance(reply, LocationsReply)
    assert reply.winner_runs == ((0, 2, 0), (5, 6, 3), (MAX_MAPPERS - 1, MAX_MAPPERS, 1))
    decoded = from_json(LocationsReply, to_json(reply))
    assert [decoded.winners[m] for m in (0, 1, 2, 5, MAX_MAPPERS - 2, MAX_MAPPERS - 1)] == [
        0,
        0,
        -1,
        3,
        -1,
        1,
    ]
    for cmd in (c.GetShuffle("app", 0), c.Status()):
        assert reply_bytes(state, cmd) < 4_000


def test_every_map_ended_with_a_few_exceptions_is_a_few_runs() -> None:
    """Regression (issue 13): all maps ended, winner 0 but for a few; runs, then the ``maps``
    of every partition, answered from runs of equal bitmaps."""
    n = 100_000
    state = shuffle_state(n)
    late = {17: 1, 40_000: 2, n - 1: 1}
    for m in range(n):
        end(state, m, late.get(m, 0), bits(4, 0, 1, 2, 3) if m % 50_000 else bits(4, 1))
    replies = [decide(state, c.GetLocations("app", 0, p), 0.0, random.Random(0))[0] for p in range(4)]
    sizes = [len(encode_body(to_json(r))) for r in replies]
    assert max(sizes) < 2_000
    reply = replies[0]
    assert isinstance(reply, LocationsReply)
    assert reply.winner_runs == (
        (0, 17, 0),
        (17, 18, 1),
        (18, 40_000, 0),
        (40_000, 40_001, 2),
        (40_001, n - 1, 0),
        (n - 1, n, 1),
    )
    assert reply.maps == ((1, 50_000), (50_001, n))
    assert replies[1].maps == ((0, n),)  # type: ignore[union-attr]


def test_declared_maps_from_runs_equal_the_scan() -> None:
    rnd = random.Random(9)
    state = shuffle_state(3000, num_partitions=12)
    pool = [bits(12, *rnd.sample(range(12), k)) for k in (1, 3, 5, 12)]
    order = list(range(3000))
    rnd.shuffle(order)
    for m in order:
        end(state, m, 0, pool[(m // 7) % len(pool)])
    info = state.shuffle("app", 0)
    assert info is not None
    runs_answers = [info._declaring(p) for p in range(12)]
    scan = ShuffleInfo(info.app_id, 0, info.num_mappers, 12, True, info.pairs, 0.0)
    scan.winners = info.winners
    scan.derived.bitmap_runs = RunCache(cap=0)  # over the cap at once: the scan
    for m, (_, _, b) in info.winners.items():
        scan.derived.bitmap_runs.add(m, b)
    assert scan.derived.bitmap_runs.runs() is None
    assert [scan._declaring(p) for p in range(12)] == runs_answers


def test_maps_are_absent_until_every_map_has_ended() -> None:
    state = shuffle_state(3)
    end(state, 0, 0, bits(4, 1))
    reply = decide(state, c.GetLocations("app", 0, 1), 0.0, random.Random(0))[0]
    assert isinstance(reply, LocationsReply) and reply.maps is None
    end(state, 1, 0, bits(4, 1))
    end(state, 2, 0, bits(4, 2))
    reply = decide(state, c.GetLocations("app", 0, 1), 0.0, random.Random(0))[0]
    assert isinstance(reply, LocationsReply) and reply.maps == ((0, 2),)


def test_a_batch_splits_into_replies_sharing_one_lookup() -> None:
    state = shuffle_state(10)
    for m in range(10):
        end(state, m, m % 2, bits(4, 0))
    parts = tuple(range(4)) * (MAX_PARTITIONS_PER_CALL // 4)
    batch = decide(state, c.GetLocationsBatch("app", 0, parts), 0.0, random.Random(0))[0]
    assert isinstance(batch, LocationsBatchReply)
    split = batch.split()
    assert len(split) == len(parts) and split[0].winners is split[-1].winners
    assert [split[5].winners[m] for m in range(10)] == [m % 2 for m in range(10)]


def test_summaries_do_not_list_maps() -> None:
    state = shuffle_state(MAX_MAPPERS)
    summary = decide(state, c.GetShuffle("app", 0), 0.0, random.Random(0))[0]
    assert isinstance(summary, ShuffleSummary) and summary.mappers_ended == 0
    status = decide(state, c.Status(), 0.0, random.Random(0))[0]
    assert isinstance(status, StatusReply) and len(status.shuffles) == 1


class _Untouchable(dict[int, tuple[int, int, bytes | None]]):
    """A winners dict that allows a few single lookups and no walk: a reply must not read the
    winners map by map."""

    lookups = 0

    def _count(self, key: int, default: object = None) -> object:
        type(self).lookups += 1
        assert type(self).lookups < 100, "a reply read the winners map by map (O(num_mappers))"
        return dict.get(self, key, default)

    def _refuse(self, *_: object) -> None:
        raise AssertionError("a reply walked the winners (O(num_mappers))")

    get = _count  # type: ignore[assignment]
    __iter__ = items = values = keys = _refuse  # type: ignore[assignment]


def test_replies_never_walk_the_winners_map_by_map() -> None:
    """Regression (issue 13): every reply built one entry per map, and the first ``maps`` of
    each partition tested every winner's bitmap; now both come from runs kept by the fold."""
    n = 50_000
    state = shuffle_state(n)
    for m in range(n - 1):
        end(state, m, 1 if m == 7 else 0, bits(4, 0, 1, 2, 3) if m % 1000 else bits(4, 2))
    info = state.shuffle("app", 0)
    assert info is not None
    info.winners = _Untouchable(info.winners)
    rng = random.Random(0)
    before = [c.GetLocations("app", 0, 2), c.RevivePartition("app", 0, 1, epoch=0)]
    after = [c.GetLocationsBatch("app", 0, (0, 1, 2, 3)), c.GetLocations("app", 0, 2), c.GetShuffle("app", 0)]
    for cmd in [*before, c.MapperEnd("app", 0, n - 1, 0, 4, bits(4, 0, 1, 2, 3)), *after, c.Status()]:
        reply, events = decide(state, cmd, 0.0, rng)
        for event in events:
            apply(state, event)
        assert len(encode_body(to_json(reply))) < 4_000
    batch = decide(state, after[0], 0.0, rng)[0]
    assert isinstance(batch, LocationsBatchReply)
    assert batch.winner_runs == ((0, 7, 0), (7, 8, 1), (8, n, 0))
    assert [e.maps for e in batch.partitions][1:3] == [
        ((1, 1000), *((k * 1000 + 1, k * 1000 + 1000) for k in range(1, 50))),
        ((0, n),),
    ]
