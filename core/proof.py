"""The proof that a partition was read completely (DESIGN §8, issue 12).

A reader keeps the batches it read, identified by ``(map, attempt, batch_id)``,
and the seals ``(map, attempt, count)`` it saw, across every epoch and copy. The
partition is complete exactly when, for the winning attempt of each map that
declared the partition (the locations reply's ``maps``), a seal arrived and so
did every data batch ``0..count-1``, and no winning map that did not declare the
partition sent data to it. Batches and seals of attempts that did not win never
count. Without ``maps`` (a master that does not send it) only the maps seen can
be checked: a map whose every batch and seal was lost goes unnoticed.

The winners come as runs (the locations reply's ``winner_runs``): ``WinnerRuns`` looks a
map's winning attempt up in them without expanding them to ``num_mappers`` entries.

Pure functions on plain values, stdlib only; no state, no threads.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Missing", "Verdict", "WinnerRuns", "expand_ranges", "prove", "runs_of"]

Triple = tuple[int, int, int]
Run = tuple[int, int, int]
"""``(lo, hi, attempt)``: maps ``lo..hi-1`` ended and their winning attempt is ``attempt``."""


def runs_of(winners: Iterable[int]) -> tuple[Run, ...]:
    """The maximal runs of a per-map winners list (``-1``: not ended), sorted."""
    out: list[Run] = []
    for m, attempt in enumerate(winners):
        if attempt < 0:
            continue
        if out and out[-1][1] == m and out[-1][2] == attempt:
            out[-1] = (out[-1][0], m + 1, attempt)
        else:
            out.append((m, m + 1, attempt))
    return tuple(out)


class WinnerRuns:
    """Each map's winning attempt, looked up in sorted runs (``-1``: the map has not ended).

    Indexes like the list ``winners[m]`` it stands for (``len`` is ``num_mappers``), in
    ``O(log runs)``, without expanding the runs.

    Raises:
        ValueError: a run that is not three integers ``0 <= lo < hi <= num_mappers``,
            ``attempt >= 0``, or runs that are not sorted and disjoint.
    """

    __slots__ = ("_attempts", "_his", "_starts", "ended", "num_mappers", "runs")

    def __init__(self, runs: Iterable[Sequence[int]], num_mappers: int) -> None:
        checked: list[Run] = []
        end = 0
        for r in runs:
            if len(r) != 3 or not end <= r[0] < r[1] <= num_mappers or r[2] < 0:
                raise ValueError(
                    f"a winner run is [lo, hi, attempt], sorted, disjoint, within {num_mappers} maps, "
                    f"got {list(r)}"
                )
            end = r[1]
            checked.append((r[0], r[1], r[2]))
        self.runs = tuple(checked)
        self.num_mappers = num_mappers
        self._starts = [r[0] for r in checked]
        self._his = [r[1] for r in checked]
        self._attempts = [r[2] for r in checked]
        self.ended = sum(hi - lo for lo, hi, _ in checked)

    @classmethod
    def of(cls, winners: Sequence[int]) -> WinnerRuns:
        """From a per-map list (``winners[m]``, ``-1`` for maps not ended)."""
        return cls(runs_of(winners), len(winners))

    def __len__(self) -> int:
        return self.num_mappers

    def __getitem__(self, m: int) -> int:
        """Map ``m``'s winning attempt, or -1.

        Raises:
            IndexError: ``m`` is not in ``0..num_mappers-1`` (as the list would).
        """
        if not 0 <= m < self.num_mappers:
            raise IndexError(f"map {m} is out of range 0..{self.num_mappers - 1}")
        i = bisect_right(self._starts, m) - 1
        return self._attempts[i] if i >= 0 and m < self._his[i] else -1

    def __iter__(self) -> Iterator[int]:
        """Every map's winner in turn: ``num_mappers`` values (what the runs avoid; for callers
        that want the list)."""
        m = 0
        for lo, hi, attempt in self.runs:
            yield from itertools.repeat(-1, lo - m)
            yield from itertools.repeat(attempt, hi - lo)
            m = hi
        yield from itertools.repeat(-1, self.num_mappers - m)

    def __repr__(self) -> str:
        return f"WinnerRuns({list(self.runs)!r}, {self.num_mappers})"


@dataclass(frozen=True, slots=True)
class Missing:
    """One map whose data for the partition is not all there, and why."""

    map_id: int
    partition: int
    reason: str

    def __str__(self) -> str:
        return f"map {self.map_id}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The proof's outcome: ``missing`` is empty exactly when the partition is complete."""

    partition: int
    missing: tuple[Missing, ...]

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def pairs(self) -> list[list[int]]:
        """The ``[map_id, partition]`` pairs whose data is missing, sorted, once each."""
        return [[m, self.partition] for m in sorted({x.map_id for x in self.missing})]


def expand_ranges(ranges: Iterable[Sequence[int]]) -> set[int]:
    """The map ids in ``[lo, hi]`` ranges, each the maps ``lo..hi-1`` (``hi`` excluded).

    Raises:
        ValueError: a range that is not two integers with ``0 <= lo <= hi``.
    """
    out: set[int] = set()
    for r in ranges:
        if len(r) != 2 or not 0 <= r[0] <= r[1]:
            raise ValueError(f"a map range is [lo, hi] with 0 <= lo <= hi, got {list(r)}")
        out.update(range(r[0], r[1]))
    return out


Winners = Sequence[int] | WinnerRuns
"""``winners[m]``: map ``m``'s winning attempt, or ``-1``; a list or runs."""


def _winning(winners: Winners, items: Iterable[Triple]) -> dict[int, set[int]]:
    """map -> the third fields of the items from that map's winning attempt."""
    out: dict[int, set[int]] = {}
    n = len(winners)
    looked: dict[int, int] = {}  # each map's winner looked up once (runs: a binary search)
    for m, attempt, value in items:
        winner = looked.get(m)
        if winner is None:
            winner = looked[m] = winners[m] if 0 <= m < n else -1
        if attempt == winner >= 0:
            out.setdefault(m, set()).add(value)
    return out


def _check_map(m: int, winner: int, ids: set[int], counts: set[int] | None) -> list[str]:
    """Why map ``m``'s winning attempt is incomplete; empty when it is complete."""
    if winner < 0:
        return ["no winning attempt"]
    if not counts:
        return [f"attempt {winner}: {len(ids)} batches but no seal"]
    if len(counts) > 1:
        first, second = sorted(counts)[:2]
        return [f"attempt {winner}: sealed with {first} and {second} batches"]
    (count,) = counts
    reasons = []
    missing = [b for b in range(count) if b not in ids]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        reasons.append(f"attempt {winner}: {len(missing)} of {count} batches missing ({shown})")
    extra = sorted(b for b in ids if b >= count)
    if extra:
        reasons.append(f"attempt {winner}: batches {extra[:10]} beyond its seal of {count}")
    return reasons


def prove(
    partition: int,
    winners: Winners,
    batches: Iterable[Triple],
    seals: Iterable[Triple],
    maps: Iterable[Sequence[int]] | None,
) -> Verdict:
    """Decide whether what was read of ``partition`` is all of it.

    Parameters:
        partition: the partition read (it names the missing pairs).
        winners: ``winners[m]`` is map ``m``'s winning attempt, or ``-1`` (a list, or
            ``WinnerRuns``: looked up, never expanded).
        batches: the data batches read, ``(map, attempt, batch_id)``; any attempt, repeats allowed.
        seals: the seals read, ``(map, attempt, count)``; any attempt, repeats allowed.
        maps: the ``[lo, hi]`` ranges of maps whose winning attempt declared the
            partition, or ``None`` when the master did not say (only maps seen are checked).

    Raises:
        ValueError: a malformed range in ``maps``.
    """
    ids = _winning(winners, batches)
    counts = _winning(winners, seals)
    seen = set(ids) | set(counts)
    declared = seen if maps is None else expand_ranges(maps)
    missing: list[Missing] = []
    for m in sorted(declared | seen):
        winner = winners[m] if m < len(winners) else -1
        if m not in declared:
            reasons = [f"attempt {winner}: sent data but did not declare the partition"]
        else:
            reasons = _check_map(m, winner, ids.get(m, set()), counts.get(m))
        missing.extend(Missing(m, partition, reason) for reason in reasons)
    return Verdict(partition, tuple(missing))
