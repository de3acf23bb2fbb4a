"""``judge``: which copies failed at commit, and which declared seals no surviving copy holds.

The commit coordinator gathers every worker's ``COMMIT_FILES`` reply and hands them here
with the plan (every copy of every location, and each map's winning attempt with its
declared partitions). A copy **fails** when:

- its worker could not be reached, or reported an error for it;
- its worker has restarted since the copy was placed (another incarnation): its memory,
  and so any batch acked before the restart, is gone, whatever it holds now;
- it lacks a winning attempt's seal that a surviving sibling copy (same partition and
  epoch) holds: it missed data its sibling acked.

A winning map that declared partition ``p`` must then have its seal in a surviving copy
of some epoch of ``p``; the pairs that do not are ``lost_maps``, as
``(partition, lo, hi)`` ranges of map ids. A copy of a declared partition that did not
fail and that its worker did not report holds nothing (nothing was pushed to it: a worker
opens a location at its first batch; an epoch placed after the last push to it): it is
**empty**, and has no file to read or offload. (Copies of partitions no winning map
declared are empty too, and known to be from the declarations: they are not listed.) Pure:
no state, no threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from croupier.core.bitmap import bitmap_size, partitions_of, ranges
from croupier.core.dataplane import CommitFilesReply, LocationReport
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest
from croupier.core.state import ShuffleInfo, Winner

__all__ = ["Copy", "Verdict", "empty_copies", "judge", "lost_epochs"]

Where = tuple[int, int]  # (partition, epoch)


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy of one location, as placed."""

    partition: int
    epoch: int
    worker: str
    role: str
    incarnation: str | None  # the worker's incarnation when the location was placed


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``ReportCommit`` carries: failed ``(partition, epoch, worker)`` copies, missing
    ``(partition, lo, hi)`` maps, the committed primaries' totals, and the empty copies."""

    failed: tuple[tuple[int, int, str], ...]
    lost_maps: tuple[tuple[int, int, int], ...]
    total_bytes: int
    total_batches: int
    empty: tuple[tuple[int, int, str], ...] = ()


def judge(
    copies: Iterable[Copy],
    replies: Mapping[str, CommitFilesReply | None],
    winners: Mapping[int, Winner],
    num_partitions: int,
) -> Verdict:
    """Decide the commit outcome of every copy (see the module docstring).

    Parameters:
        copies: every copy of every location of the shuffle.
        replies: worker -> its COMMIT_FILES reply, or None when it could not be reached.
        winners: map -> its winning attempt, touched count and declared bitmap.
        num_partitions: the shuffle's, for the size of the coverage bitmaps.
    """
    held: dict[tuple[int, int, str, str], LocationReport] = {}
    total_bytes = total_batches = 0
    for w, reply in replies.items():
        for loc in reply.locations if reply is not None else ():
            held[(loc.partition, loc.epoch, w, loc.role)] = loc
            if loc.ok and loc.role == CopyRole.PRIMARY:
                total_bytes += loc.bytes or 0
                total_batches += loc.batches or 0
    failed: set[tuple[int, int, str]] = set()
    unreported: set[tuple[int, int, str]] = set()
    sealed: dict[Where, list[tuple[str, frozenset[int]]]] = {}
    for copy in copies:
        reply = replies.get(copy.worker)
        report = held.get((copy.partition, copy.epoch, copy.worker, copy.role))
        where = (copy.partition, copy.epoch)
        if _lost_memory(copy, reply, report):
            failed.add((copy.partition, copy.epoch, copy.worker))
            sealed.setdefault(where, [])
        else:
            sealed.setdefault(where, []).append((copy.worker, _winning_seals(report, winners)))
            if report is None:
                unreported.add((copy.partition, copy.epoch, copy.worker))
    covered = _siblings(sealed, failed)
    declared = 0
    for _, _, bitmap in winners.values() if unreported else ():
        if bitmap is not None:
            declared |= int.from_bytes(bitmap, "little")
    empty = {c for c in unreported - failed if declared >> c[0] & 1}
    return Verdict(
        tuple(sorted(failed)),
        _missing(winners, covered, num_partitions),
        total_bytes,
        total_batches,
        tuple(sorted(empty)),
    )


def _lost_memory(copy: Copy, reply: CommitFilesReply | None, report: LocationReport | None) -> bool:
    """Unreachable, an error, or a worker restarted since placement."""
    if reply is None:
        return True
    if report is not None and not report.ok:
        return True
    return copy.incarnation is not None and reply.incarnation != copy.incarnation


def _winning_seals(report: LocationReport | None, winners: Mapping[int, Winner]) -> frozenset[int]:
    """The maps whose winning attempt's seal this copy holds (none when it holds nothing)."""
    if report is None or not report.seals:
        return frozenset()
    return frozenset(m for m, a, _ in report.seals if (w := winners.get(m)) is not None and w[0] == a)


def _siblings(
    sealed: dict[Where, list[tuple[str, frozenset[int]]]], failed: set[tuple[int, int, str]]
) -> dict[int, set[int]]:
    """Fail each copy that lacks a seal its sibling holds; return map -> partitions whose seal
    survives in some copy."""
    covered: dict[int, set[int]] = {}
    for (p, e), holders in sealed.items():
        union = frozenset().union(*(seals for _, seals in holders))
        for worker, seals in holders:
            if seals != union:
                failed.add((p, e, worker))
        if any(seals == union for _, seals in holders):
            for m in union:
                covered.setdefault(m, set()).add(p)
    return covered


def _missing(
    winners: Mapping[int, Winner], covered: dict[int, set[int]], num_partitions: int
) -> tuple[tuple[int, int, int], ...]:
    """``(partition, lo, hi)`` ranges of declared (map, partition) pairs with no surviving seal."""
    size = bitmap_size(num_partitions)
    by_partition: dict[int, list[int]] = {}
    for m, (_, _, declared) in sorted(winners.items()):
        if declared is None:
            continue  # declared nothing (ended before declarations were logged): nothing to check
        seen = bytearray(size)
        for p in covered.get(m, ()):
            seen[p >> 3] |= 1 << (p & 7)
        gone = int.from_bytes(declared, "little") & ~int.from_bytes(seen, "little")
        if gone:
            for p in partitions_of(gone.to_bytes(size, "little")):
                by_partition.setdefault(p, []).append(m)
    return tuple((p, lo, hi) for p in sorted(by_partition) for lo, hi in ranges(by_partition[p]))


def empty_copies(
    info: ShuffleInfo, empty: tuple[tuple[int, int, str], ...], failed: tuple[tuple[int, int, str], ...]
) -> tuple[tuple[int, int, str], ...]:
    """The reported empty copies, checked against the placement.

    Raises:
        BadRequest: one names a copy the shuffle does not have, or one that failed too.
    """
    both = set(empty) & set(failed)
    if both:
        raise BadRequest(f"copy {min(both)} is reported both empty and failed")
    for p, e, w in empty:
        if not 0 <= p < info.num_partitions:
            raise BadRequest(f"partition {p} is out of range")
        if not any(loc.epoch == e and w in (loc.primary, loc.replica) for loc in info.locations(p)):
            raise BadRequest(f"partition {p} epoch {e} has no copy on {w}")
    return tuple(sorted(set(empty)))


def lost_epochs(info: ShuffleInfo, failed_copies: tuple[tuple[int, int, str], ...]) -> set[int]:
    """The partitions with an epoch whose every copy failed.

    Raises:
        BadRequest: a failed copy names a partition or epoch the shuffle lacks.
    """
    failed: dict[tuple[int, int], set[str]] = {}
    for p, e, w in failed_copies:
        if not 0 <= p < info.num_partitions:
            raise BadRequest(f"partition {p} is out of range")
        failed.setdefault((p, e), set()).add(w)
    lost: set[int] = set()
    for (p, e), workers in failed.items():
        locs = [loc for loc in info.locations(p) if loc.epoch == e]
        if not locs:
            raise BadRequest(f"partition {p} has no epoch {e}")
        loc = locs[0]
        copies = {loc.primary} | ({loc.replica} if loc.replica else set())
        if copies <= workers:
            lost.add(p)
    return lost
