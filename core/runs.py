"""``RunCache``: values of map ids kept as maximal runs, for the master's winners (pure).

The master answers locations with the winners as runs ``(lo, hi, attempt)``
(PROTOCOL §4, ``winner_runs``); this cache keeps them up to date as ``MapperEnded``
events fold in, without rescanning every map (``croupier.core.state`` owns one per shuffle).
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["RunCache"]

V = TypeVar("V")


class RunCache(Generic[V]):
    """Values of map ids as maximal runs ``(lo, hi, value)`` (equal values merge), kept
    as MapperEnded folds in.

    A map that extends the last run, or starts a run after it (maps ending in order),
    costs O(1). Others wait in ``pending`` and are merged into the runs (one linear
    pass) when asked, or once they outnumber the runs: O(log) amortised per map,
    whatever the order, and asking costs O(runs + maps added since). With ``cap``,
    the cache gives up (``runs()`` is None for good) once it holds more runs than that.
    """

    __slots__ = ("_cap", "_frozen", "_pending", "_runs")

    def __init__(self, cap: int | None = None) -> None:
        self._cap = cap
        self._runs: list[tuple[int, int, V]] | None = []
        self._pending: list[tuple[int, V]] = []
        self._frozen: tuple[tuple[int, int, V], ...] | None = ()

    def add(self, map_id: int, value: V) -> None:
        """Record the value of a map not recorded yet."""
        runs = self._runs
        if runs is None:
            return
        self._frozen = None
        if not self._pending and (not runs or runs[-1][1] <= map_id):
            if runs and runs[-1][1] == map_id and runs[-1][2] == value:
                runs[-1] = (runs[-1][0], map_id + 1, value)
            else:
                runs.append((map_id, map_id + 1, value))
                self._check_cap(runs)
            return
        self._pending.append((map_id, value))
        if len(self._pending) >= max(1024, len(runs)):
            self._merge(runs)

    def runs(self) -> tuple[tuple[int, int, V], ...] | None:
        """Every run, sorted (the same tuple object until a map is added); None once over the cap."""
        if self._frozen is None and self._runs is not None:
            self._merge(self._runs)
            if self._runs is not None:
                self._frozen = tuple(self._runs)
        return self._frozen if self._runs is not None else None

    def _check_cap(self, runs: list[tuple[int, int, V]]) -> None:
        if self._cap is not None and len(runs) > self._cap:
            self._runs, self._pending, self._frozen = None, [], None

    def _merge(self, runs: list[tuple[int, int, V]]) -> None:
        if not self._pending:
            return
        # two sorted lists of disjoint runs (map ids are unique, so values are never
        # compared): timsort merges them in one linear pass
        added = [(m, m + 1, v) for m, v in sorted(self._pending, key=lambda p: p[0])]
        self._pending.clear()
        out: list[tuple[int, int, V]] = []
        for lo, hi, value in sorted(runs + added, key=lambda r: r[0]):
            if out and out[-1][1] == lo and out[-1][2] == value:
                out[-1] = (out[-1][0], hi, value)
            else:
                out.append((lo, hi, value))
        self._runs = out
        self._check_cap(out)
