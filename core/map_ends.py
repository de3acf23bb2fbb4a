"""``MAPPER_END`` and ``MAPPER_END_BATCH`` decided: the winning attempt of each map.

The first attempt of a map that is logged wins; a repeat of any attempt logs nothing and
gets the same answer (who won, whether it is this one, whether every map has ended).

A ``MapperEndBatch`` is decided entry by entry, in order, exactly as its ``MapperEnd``s
would be one after the other: an entry sees the winners of the entries before it. Its
winners are logged as one ``MappersEnded`` (issue 27: one event, one record and one reply
per request rather than per entry), split only to keep each event's bitmaps within
``ENDS_EVENT_CHARS``. An entry refused for its own sake (out of range, a rerun attempt, a
bitmap that does not fit) gets its error in its slot of the reply; the others still win.
"""

from __future__ import annotations

import random

from croupier.core.bitmap import decode_bitmap, validate_bitmap
from croupier.core.commands import MapperEnd, MapperEndBatch
from croupier.core.errors import BadRequest, Conflict, CroupierError
from croupier.core.events import Event, MapperEnded, MappersEnded
from croupier.core.lookup import need_shuffle
from croupier.core.replies import EndRefused, MapperEndReply, MapperEndsReply, Reply
from croupier.core.state import MasterState, ShuffleInfo

__all__ = ["ENDS_EVENT_CHARS", "end_map", "end_maps"]

ENDS_EVENT_CHARS = 256 * 1024  # the bitmaps' characters in one MappersEnded (a znode holds ~1 MiB)

End = tuple[int, int, int, str]  # (map_id, attempt_id, touched, partitions)


def _decide_end(info: ShuffleInfo, end: End, won: dict[int, int]) -> MapperEndReply:
    """One entry against ``info`` and the winners ``won`` before it in its request (added to).

    Raises:
        BadRequest: the map is out of range, or the bitmap does not fit the shuffle.
        Conflict: the attempt lost its data and its map was rerun.
    """
    map_id, attempt, touched, partitions = end
    if not 0 <= map_id < info.num_mappers:
        raise BadRequest(f"map_id {map_id} is out of range 0..{info.num_mappers - 1}")
    ended = len(info.winners) + len(won)
    winner = info.winners.get(map_id)
    first = winner[0] if winner is not None else won.get(map_id)
    if first is not None:
        return MapperEndReply(first, first == attempt, ended == info.num_mappers)
    if info.commit is not None:  # pragma: no cover - commit needs every map ended
        raise Conflict("shuffle already committed")
    if info.refuses(map_id, attempt):
        raise Conflict(
            f"attempt {attempt} of map {map_id} lost its data and was rerun; a rerun uses a new attempt id",
            {"maps": [map_id]},
        )
    validate_bitmap(decode_bitmap(partitions), info.num_partitions, touched)
    won[map_id] = attempt
    return MapperEndReply(attempt, True, ended + 1 == info.num_mappers)


def end_map(state: MasterState, cmd: MapperEnd, now: float, rng: random.Random) -> tuple[Reply, list[Event]]:
    """``MAPPER_END``: a ``MapperEnded`` when this attempt is its map's first."""
    info = need_shuffle(state, cmd.app_id, cmd.shuffle_id)
    won: dict[int, int] = {}
    body = _decide_end(info, (cmd.map_id, cmd.attempt_id, cmd.touched, cmd.partitions), won)
    if not won:
        return body, []
    return body, [
        MapperEnded(cmd.app_id, cmd.shuffle_id, cmd.map_id, cmd.attempt_id, cmd.touched, cmd.partitions)
    ]


def _refused(error: CroupierError) -> EndRefused:
    """The slot of an entry refused with ``error``."""
    return EndRefused({"status": error.status, **error.to_wire()})


def end_maps(
    state: MasterState, cmd: MapperEndBatch, now: float, rng: random.Random
) -> tuple[Reply, list[Event]]:
    """``MAPPER_END_BATCH``: every entry decided in order; their winners as ``MappersEnded``s."""
    results: list[MapperEndReply | EndRefused] = []
    try:
        info = need_shuffle(state, cmd.app_id, cmd.shuffle_id)
    except CroupierError as exc:  # each entry's MAPPER_END would get it
        return MapperEndsReply((_refused(exc),) * len(cmd.ends)), []
    won: dict[int, int] = {}
    winners: list[End] = []
    for end in cmd.ends:
        before = len(won)
        try:
            results.append(_decide_end(info, end, won))
        except CroupierError as exc:
            results.append(_refused(exc))
            continue
        if len(won) > before:
            winners.append(end)
    return MapperEndsReply(tuple(results)), _events(cmd.app_id, cmd.shuffle_id, winners)


def _events(app_id: str, shuffle_id: int, winners: list[End]) -> list[Event]:
    """``winners`` as ``MappersEnded``s, in order, each within ``ENDS_EVENT_CHARS`` of bitmaps."""
    events: list[Event] = []
    start, chars = 0, 0
    for i, end in enumerate(winners):
        if i > start and chars + len(end[3]) > ENDS_EVENT_CHARS:
            events.append(MappersEnded(app_id, shuffle_id, tuple(winners[start:i])))
            start, chars = i, 0
        chars += len(end[3])
    if start < len(winners):
        events.append(MappersEnded(app_id, shuffle_id, tuple(winners[start:])))
    return events
