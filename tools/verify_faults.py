"""The faults ``croupier verify`` knows, and its seeded schedule of them.

No state and no threads: a schedule is a pure function of the seed and the faults
asked for, so a failing run is replayed by running it again with the same seed.

A fault is a kind (what happens), a phase (when, relative to the shuffle's life) and a
target (which copy of which partition, drawn here; the process holding it is looked up
only when the fault fires). Every kind but ``corrupt-both`` destroys at most one copy
of any partition: then every record must read back exactly once and no ``DataLost``
may be raised. ``corrupt-both`` damages both copies of one partition: a ``DataLost``
naming it is then the right answer (reading it back intact is too, when the damage
came too late to matter); anything else is a failure. ``disk-full`` fills every data
directory of the worker holding the target copy (its directories are small filesystems
then): maps whose writers fail are retried, and every record must still read back
exactly once, with no ``DataLost`` (the other copy holds what the full one lost).
``double-kill`` kills -9 both workers holding the partition's copies after the commit: the
reader's ``DataLost`` must be recovered from by rerunning exactly the maps the master names
lost (``Shuffle.rerun``), after which every record must read back exactly once.
``all-gone`` (with an object store, issue 26) waits for ``Shuffle.wait_offloaded`` after the
commit, then kills -9 **every** worker: every record must read back exactly once from the
store alone, with no ``DataLost``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from croupier.tools.verify_damage import DAMAGES

__all__ = ["EXPLICIT", "KINDS", "PHASES", "Fault", "applicable", "parse_faults", "schedule"]

KINDS = (
    "kill",
    "restart",
    "pause",
    "corrupt",
    "corrupt-both",
    "leader",
    "disk-full",
    "double-kill",
    "all-gone",
)
# asked for by name only: disk-full mounts small filesystems, which needs root; double-kill
# waits out the master's worker timeout and rewrites the lost maps (and adds a 4th worker);
# all-gone needs an object store (``--object-store``)
EXPLICIT = ("disk-full", "double-kill", "all-gone")
PHASES = ("mid-push", "after-close", "during-commit", "after-commit", "mid-read")
# damaged files must be committed ones: the commit writes the index
_LATE = ("after-commit", "mid-read")
# a full disk matters while data is written; after the commit reads must not mind it
_DISK_FULL = ("mid-push", "after-close", "after-commit")
# a rerun reopens a committed shuffle; only a committed shuffle is offloaded
_DOUBLE_KILL = ("after-commit",)


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled fault.

    Attributes:
        kind: one of :data:`KINDS`.
        phase: one of :data:`PHASES`.
        partition: whose copy is hit (for ``leader``: only where the phase is measured from).
        role: ``primary`` or ``replica``: which copy's worker is hit.
        damage: for the corrupt kinds, one of :data:`~croupier.tools.verify_damage.DAMAGES`.
        restart: for the corrupt kinds, restart the damaged copies' workers afterwards (so
            they load the damaged files from disk); always for a damaged ``.index``, which a
            running worker holds in memory.
    """

    kind: str
    phase: str
    partition: int
    role: str
    damage: str = ""
    restart: bool = False

    @property
    def double(self) -> bool:
        """Whether this fault destroys both copies of its partition."""
        return self.kind == "corrupt-both"

    @property
    def recovers(self) -> bool:
        """Whether the reader must recover from this fault's ``DataLost`` by a rerun."""
        return self.kind == "double-kill"

    def describe(self) -> str:
        """One line for logs and reports."""
        if self.kind == "leader":
            return f"leader (kill -9 of the leading master) at {self.phase}"
        if self.kind == "disk-full":
            return f"disk-full (the disks of partition {self.partition}'s {self.role}) at {self.phase}"
        if self.kind == "double-kill":
            return f"double-kill (kill -9 of both copies of partition {self.partition}) at {self.phase}"
        if self.kind == "all-gone":
            return f"all-gone (wait_offloaded, then kill -9 of every worker) at {self.phase}"
        extra = f" ({self.damage}{', restart' if self.restart else ''})" if self.damage else ""
        return f"{self.kind}{extra} of partition {self.partition} {self.role} at {self.phase}"


def applicable(kind: str) -> tuple[str, ...]:
    """The phases at which ``kind`` makes sense."""
    if kind == "disk-full":
        return _DISK_FULL
    if kind in ("double-kill", "all-gone"):
        return _DOUBLE_KILL
    return _LATE if kind.startswith("corrupt") else PHASES


def parse_faults(text: str | None, *, ha: bool) -> list[tuple[str, str]]:
    """The ``(kind, phase)`` cells asked for by ``--faults``: a comma list of ``KIND`` or
    ``KIND@PHASE``; empty or None means every kind that applies (``leader`` only with ``ha``;
    not ``disk-full``, ``double-kill`` nor ``all-gone``, which must be named).

    Raises:
        ValueError: an unknown kind or phase, a phase the kind does not apply to, or
            ``leader`` without ``ha``.
    """
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not items:
        items = [k for k in KINDS if (ha or k != "leader") and k not in EXPLICIT]
    cells: list[tuple[str, str]] = []
    for item in items:
        kind, _, phase = item.partition("@")
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r} (known: {', '.join(KINDS)})")
        if kind == "leader" and not ha:
            raise ValueError("the leader fault needs --ha (one master otherwise)")
        phases = applicable(kind)
        if phase and phase not in phases:
            raise ValueError(f"fault {kind} applies at {', '.join(phases)}, not {phase!r}")
        cells += [(kind, p) for p in ([phase] if phase else phases) if (kind, p) not in cells]
    return cells


def schedule(seed: int, cells: list[tuple[str, str]], shuffles: int, partitions: int) -> list[Fault]:
    """``shuffles`` faults drawn from ``random.Random(seed)``: the cells in a shuffled
    round-robin (every cell once before any twice), each with a drawn target."""
    rng = random.Random(seed)
    order: list[tuple[str, str]] = []
    while len(order) < shuffles:
        batch = list(cells)
        rng.shuffle(batch)
        order += batch
    faults = []
    for kind, phase in order[:shuffles]:
        damage = rng.choice(DAMAGES) if kind.startswith("corrupt") else ""
        restart = damage.endswith("index") or (bool(damage) and rng.random() < 0.5)
        faults.append(
            Fault(kind, phase, rng.randrange(partitions), rng.choice(("primary", "replica")), damage, restart)
        )
    return faults
