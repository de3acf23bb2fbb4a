"""Reruns: which maps' data is lost, and reopening a committed shuffle for exactly those maps.

A map's data in a partition is **lost** when the commit found no surviving copy with its
seal there (``ShuffleCommitted.lost_maps``), or when, since the commit, every copy of some
epoch of the partition went to workers now lost (or removed): then every winning map that
declared the partition counts as lost there (the master does not know which epoch held
which map's batches, so this errs on the side of a rerun, which is always safe: the new
attempt replaces the old one in every partition). Copies on workers that restarted since
they were placed are **suspect**: the files may have survived the restart, or not.

``GET_LOST_MAPS`` answers both; ``RERUN_MAPS`` accepts maps that are lost or suspect, and
refuses any other with ``CONFLICT`` naming them. Pure: no clocks, sockets or threads.
"""

from __future__ import annotations

import random

from croupier.core.bitmap import partitions_of, ranges
from croupier.core.commands import GetLostMaps, RerunMaps
from croupier.core.enums import WorkerStatus
from croupier.core.errors import BadRequest, Conflict
from croupier.core.events import Event, MapsRerun, PartitionRevived
from croupier.core.lookup import need_shuffle as _shuffle
from croupier.core.placement import Candidate, place
from croupier.core.replies import LostMapsReply, RerunReply
from croupier.core.state import MasterState, ShuffleInfo

__all__ = ["get_lost_maps", "lost_pairs", "rerun_maps", "rerunning"]

RERUN_REASON = "rerun"


def _gone_workers(state: MasterState, info: ShuffleInfo) -> tuple[set[str], set[str]]:
    """The shuffle's workers now lost or removed, and those restarted since placement and
    since the commit (whose verdict already judged what an earlier restart left)."""
    gone: set[str] = set()
    restarted: set[str] = set()
    for wid in info.workers():
        worker = state.workers.get(wid)
        if worker is None or worker.status == WorkerStatus.LOST:
            gone.add(wid)
    since = info.commit.at if info.commit is not None else 0.0
    placed = [info.incarnations, *(loc.incarnations for locs in info.revivals.values() for loc in locs)]
    for incarnations in placed:
        for wid, incarnation in incarnations:
            worker = state.workers.get(wid)
            if wid in gone or worker is None or worker.incarnation == incarnation:
                continue
            if worker.registered_at >= since:  # the commit judged the copies of earlier lives
                restarted.add(wid)
    return gone, restarted


def _dead_partitions(info: ShuffleInfo, dead: set[str]) -> list[int]:
    """Partitions with an epoch whose every copy failed at commit or is on a ``dead`` worker,
    one of them newly (a copy the commit found failed was already judged there).

    Only partitions with a location on a ``dead`` worker are looked at: those of the epoch-0
    pairs that name one, and the revived ones.
    """
    if not dead:
        return []
    failed = {(p, e, w) for p, e, w in info.commit.lost_copies} if info.commit else set()
    n = len(info.pairs)
    touched = {i for i, pair in enumerate(info.pairs) if dead & set(pair)}
    candidates = {p for i in touched for p in range(i, info.num_partitions, n)} | set(info.revivals)
    out = []
    for p in sorted(candidates):
        for loc in info.locations(p):
            copies = [w for w in (loc.primary, loc.replica) if w is not None]
            if all(w in dead or (p, loc.epoch, w) in failed for w in copies) and any(
                (p, loc.epoch, w) not in failed for w in copies
            ):
                out.append(p)
                break
    return out


def lost_pairs(state: MasterState, info: ShuffleInfo) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """``(lost, suspect)``: partition -> the winning maps whose data there is lost (suspect).

    Empty while the shuffle is not committed (a rerun in progress: its maps are rerunning).
    """
    lost: dict[int, set[int]] = {}
    suspect: dict[int, set[int]] = {}
    if info.commit is None:
        return lost, suspect
    for p, lo, hi in info.commit.lost_maps:
        lost.setdefault(p, set()).update(m for m in range(lo, hi) if m in info.winners)
    gone, restarted = _gone_workers(state, info)
    for p in _dead_partitions(info, gone):
        lost.setdefault(p, set()).update(_declaring(info, p))
    for p in _dead_partitions(info, gone | restarted):
        extra = set(_declaring(info, p)) - lost.get(p, set())
        if extra:
            suspect.setdefault(p, set()).update(extra)
    return {p: m for p, m in lost.items() if m}, suspect


def _declaring(info: ShuffleInfo, partition: int) -> list[int]:
    declared = info.declared_maps(partition)
    if declared is None:  # winners from before declarations: any of them may have written here
        return sorted(info.winners)
    return [m for lo, hi in declared for m in range(lo, hi)]


def _triples(pairs: dict[int, set[int]]) -> tuple[tuple[int, int, int], ...]:
    return tuple((p, lo, hi) for p in sorted(pairs) for lo, hi in ranges(sorted(pairs[p])))


def rerunning(info: ShuffleInfo) -> set[int]:
    """Maps reopened by a rerun that have not ended again."""
    return {m for lo, hi in info.rerun for m in range(lo, hi) if m not in info.winners}


def get_lost_maps(
    state: MasterState, cmd: GetLostMaps, now: float, rng: random.Random
) -> tuple[LostMapsReply, list[Event]]:
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    lost, suspect = lost_pairs(state, info)
    reply = LostMapsReply(
        info.num_mappers,
        info.commit is not None,
        _triples(lost),
        _triples(suspect),
        ranges(sorted(rerunning(info))),
        info.rerun,
    )
    return reply, []


def rerun_maps(
    state: MasterState, cmd: RerunMaps, now: float, rng: random.Random
) -> tuple[RerunReply, list[Event]]:
    """Reopen the shuffle for ``cmd.maps`` (see the module docstring).

    Raises:
        BadRequest: a map id out of range.
        Conflict: some maps' data is not lost (``details["maps"]`` names them), or the
            shuffle is not committed (nor are these maps already rerunning).
        NotEnoughWorkers: no healthy worker to place a new epoch on.
    """
    info = _shuffle(state, cmd.app_id, cmd.shuffle_id)
    maps = set(cmd.maps)
    if max(maps) >= info.num_mappers:
        raise BadRequest(f"map_id {max(maps)} is out of range 0..{info.num_mappers - 1}")
    if info.commit is None:
        if maps <= rerunning(info):  # a repeat: nothing new to log
            return RerunReply(ranges(sorted(maps)), (), False), []
        raise Conflict(
            f"shuffle {cmd.app_id}/{cmd.shuffle_id} is not committed: only a committed shuffle's lost maps"
            " can be rerun (wait for the commit, or for a rerun in progress to commit)"
        )
    lost, suspect = lost_pairs(state, info)
    allowed = {m for ms in (*lost.values(), *suspect.values()) for m in ms}
    refused = sorted(maps - allowed)
    if refused:
        shown = ", ".join(map(str, refused[:20])) + (" ..." if len(refused) > 20 else "")
        raise Conflict(
            f"shuffle {cmd.app_id}/{cmd.shuffle_id}: the data of maps [{shown}] is not lost; only lost"
            " maps can be rerun (GET_LOST_MAPS names them)",
            {"maps": refused},
        )
    return _reopen(state, info, maps, now, rng)


def _reopen(
    state: MasterState, info: ShuffleInfo, maps: set[int], now: float, rng: random.Random
) -> tuple[RerunReply, list[Event]]:
    """The ``MapsRerun`` event, then a new epoch for each partition the maps declared."""
    partitions: set[int] = set()
    for m in maps:
        bitmap = info.winners[m][2]
        partitions.update(partitions_of(bitmap) if bitmap is not None else range(info.num_partitions))
    refused = tuple(sorted((m, info.winners[m][0]) for m in maps))
    events: list[Event] = [MapsRerun(info.app_id, info.shuffle_id, ranges(sorted(maps)), refused, now)]
    free = {w.worker_id: w.slots - w.used_slots for w in state.workers.values() if w.eligible}
    epochs = []
    for p in sorted(partitions):
        candidates = [Candidate(w, state.workers[w].host, n) for w, n in free.items()]
        (primary, replica), *_ = place(candidates, 1, info.replicate, rng)
        for w in (primary, replica):
            if w is not None:
                free[w] -= 1
        epoch = info.current(p).epoch + 1
        placed = tuple(sorted((w, state.workers[w].incarnation) for w in (primary, replica) if w is not None))
        events.append(
            PartitionRevived(info.app_id, info.shuffle_id, p, epoch, primary, replica, RERUN_REASON, placed)
        )
        epochs.append((p, epoch))
    return RerunReply(ranges(sorted(maps)), tuple(epochs), True), events
