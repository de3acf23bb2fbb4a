"""``croupier verify``'s verdict: outcomes tallied into a fault x phase matrix, as a rich
table and as JSON.

No threads; a ``Report`` is filled by the caller's thread, one outcome per shuffle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from croupier.tools.verify_shuffle import Outcome, all_clear

__all__ = ["Cell", "Report"]

_COUNTS = (
    "shuffles",
    "fired",
    "records",
    "lost",
    "duplicated",
    "bad",
    "expected_data_lost",
    "false_data_lost",
    "missed_data_lost",
    "errors",
)

_HEADINGS = {
    "expected_data_lost": "DataLost expected",
    "false_data_lost": "DataLost false",
    "missed_data_lost": "DataLost missed",
    "duplicated": "dup",
    "rerun": "rerun maps",
}
_WIDTH = 160


@dataclass(slots=True)
class Cell:
    """The tally of one fault kind at one phase (``fired``: shuffles whose fault happened)."""

    kind: str
    phase: str
    shuffles: int = 0
    fired: int = 0
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    bad: int = 0
    expected_data_lost: int = 0
    false_data_lost: int = 0
    missed_data_lost: int = 0
    errors: int = 0
    maps: int = 0
    rerun_maps: int = 0

    def add(self, outcome: Outcome) -> None:
        self.shuffles += 1
        self.fired += outcome.fired
        self.records += outcome.records
        self.lost += outcome.lost
        self.duplicated += outcome.duplicated
        self.bad += outcome.bad
        self.expected_data_lost += outcome.expected_data_lost
        self.false_data_lost += outcome.false_data_lost
        self.missed_data_lost += outcome.missed_data_lost
        self.errors += len(outcome.errors)
        self.maps += outcome.maps
        self.rerun_maps += outcome.rerun_maps

    @property
    def rerun(self) -> str:
        """``k/N``: k of the cell's N maps were rerun (``-`` when none were)."""
        return f"{self.rerun_maps}/{self.maps}" if self.rerun_maps else "-"

    @property
    def ok(self) -> bool:
        return all_clear(self)


@dataclass(slots=True)
class Report:
    """Parameters:
    seed: the schedule's seed (printed, so a failing run can be replayed).
    ha: whether the cluster was the HA ensemble.
    """

    seed: int
    ha: bool
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, index: int, outcome: Outcome) -> None:
        """Tally the outcome of shuffle ``index`` (counted from 0); a failed one is remembered,
        with what the nemesis did, under its number counted from 1 as the progress lines show it."""
        fault = outcome.fault
        key = (fault.kind, fault.phase)
        self.cells.setdefault(key, Cell(*key)).add(outcome)
        if not outcome.ok:
            lines = [*outcome.errors, *outcome.problems][:6]
            self.failures.append(
                f"shuffle {index + 1}: {fault.describe()} [{'; '.join(outcome.actions)}]: "
                + " | ".join(lines)
            )

    def total(self, name: str) -> int:
        """The sum of one count over every cell."""
        return sum(int(getattr(c, name)) for c in self.cells.values())

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cells.values())

    def to_json(self) -> dict[str, Any]:
        """``ok``, the seed, every total, the matrix (one object per cell) and the failures."""
        totals = {name: self.total(name) for name in (*_COUNTS, "maps", "rerun_maps")}
        matrix = [{**asdict(c), "ok": c.ok} for _, c in sorted(self.cells.items())]
        return {
            "ok": self.ok,
            "seed": self.seed,
            "ha": self.ha,
            **totals,
            "matrix": matrix,
            "failures": self.failures,
        }

    def print(self, *, stderr: bool = False) -> None:
        """The matrix as a rich table, then the failures."""
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"croupier verify (seed {self.seed}{', HA' if self.ha else ''})")
        for name in ("fault", "phase", *_COUNTS, "rerun", "verdict"):
            table.add_column(
                _HEADINGS.get(name, name), justify="left" if name in ("fault", "phase") else "right"
            )
        for _, c in sorted(self.cells.items()):
            counts = [str(getattr(c, name)) for name in _COUNTS]
            table.add_row(c.kind, c.phase, *counts, c.rerun, "[green]ok[/]" if c.ok else "[red]FAIL[/]")
        console = Console(stderr=stderr)
        if not console.is_terminal:
            console.width = max(console.width, _WIDTH)  # a log file or CI: never squeeze the matrix
        console.print(table)
        for failure in self.failures:
            console.print(Text(failure, style="red"), soft_wrap=True)
        verdict = "[green]every record read back exactly once[/]" if self.ok else "[red]FAILED[/]"
        console.print(f"{self.total('shuffles')} shuffles, {self.total('records')} records: {verdict}")
