"""One verified shuffle of ``croupier verify``, with one fault fired at its phase.

Everything runs in the caller's thread: the maps are written one after the other, then
every partition is read and checked, and the nemesis is called at the fault's phase:

- ``mid-push``: halfway through map 1's records;
- ``after-close``: maps 0..M-2 closed, before the last map starts (so before the commit);
- ``during-commit``: the last map has pushed and sealed everything; the target worker is
  frozen just before its ``MapperEnd``, so the commit waits on it, then the fault fires;
- ``after-commit``: once the master says committed, before any read (``all-gone``: once
  ``Shuffle.wait_offloaded`` has returned too);
- ``mid-read``: with the target partition read in the middle; worker and leader faults
  fire after its first record, file damage just before its reader starts.

A map whose writer fails is tried again as a new attempt (as a framework would retry a
task); a read that fails with an error other than ``DataLost`` is tried again too.

Under ``double-kill`` a ``DataLost`` that names only the killed workers is recovered from:
once the master names the maps lost (after its worker timeout), exactly those maps are
rerun (``Shuffle.rerun``) and written again with new attempt ids (the records are a pure
function of the map), then the partition is read again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass, field
from typing import Protocol

import croupier
from croupier._writer import Writer
from croupier.core.errors import CroupierError, DataLostError
from croupier.core.replies import MapperEndReply
from croupier.tools.nemesis import Nemesis
from croupier.tools.verify_faults import Fault
from croupier.tools.verify_workload import (
    PartitionCheck,
    Plan,
    check_partition,
    expected_by_partition,
    make_plan,
    pools,
    record_bytes,
)

__all__ = ["Outcome", "Shape", "run_shuffle"]

log = logging.getLogger(__name__)

_TRIES = 3
_COMMIT_SETTLE = 0.3  # seconds for COMMIT_FILES to reach the frozen worker before the fault
_LOST_WAIT = 60.0  # seconds for the master to name a double-kill's maps lost
_OFFLOAD_WAIT = 120.0  # seconds for every committed partition to reach the object store


@dataclass(frozen=True, slots=True)
class Shape:
    """Parameters:
    maps, partitions: of each verified shuffle.
    map_bytes: about this many record bytes per map.
    """

    maps: int = 4
    partitions: int = 8
    map_bytes: int = 256 * 1024


class _Tally(Protocol):
    lost: int
    duplicated: int
    bad: int
    false_data_lost: int
    missed_data_lost: int

    @property
    def errors(self) -> Sized | int: ...


def all_clear(tally: _Tally) -> bool:
    """No loss, duplicate, bad record, false or missed ``DataLost``, or unexplained error."""
    errors = tally.errors if isinstance(tally.errors, int) else len(tally.errors)
    return not (
        tally.lost
        or tally.duplicated
        or tally.bad
        or tally.false_data_lost
        or tally.missed_data_lost
        or errors
    )


@dataclass(slots=True)
class Outcome:
    """What one shuffle under one fault came to.

    ``fired`` says whether the fault happened (its phase was reached);
    ``lost``/``duplicated``/``bad`` count records of partitions read without an error;
    ``expected_data_lost`` counts ``DataLost`` naming the partition a double fault
    destroyed, ``false_data_lost`` any other; ``missed_data_lost`` is 1 when a double
    fault's partition read back short without an error; ``errors`` are other failures
    that outlived the retries. ``rerun_maps`` of the shuffle's ``maps`` were rerun to
    recover from a ``double-kill``.
    """

    fault: Fault
    fired: bool = False
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    bad: int = 0
    expected_data_lost: int = 0
    false_data_lost: int = 0
    missed_data_lost: int = 0
    retries: int = 0
    maps: int = 0
    rerun_maps: int = 0
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all_clear(self)


class _HookedWriter(Writer):
    """A ``Writer`` that runs ``before_end`` once, after every ack and before ``MapperEnd``."""

    def __init__(
        self, shuffle: croupier.Shuffle, map_id: int, attempt_id: int, before_end: Callable[[], None]
    ):
        super().__init__(shuffle, map_id, attempt_id)
        self._before_end: Callable[[], None] | None = before_end

    def _mapper_end(self) -> MapperEndReply:
        hook, self._before_end = self._before_end, None
        if hook is not None:
            hook()
        return super()._mapper_end()


@dataclass(slots=True)
class _Run:
    """One shuffle's moving parts, passed between the write and read steps."""

    sh: croupier.Shuffle
    nemesis: Nemesis
    fault: Fault
    plans: list[Plan]
    pools: list[bytes]
    outcome: Outcome
    fired: bool = False
    rerun: set[int] = field(default_factory=set)

    def fire(self) -> None:
        if not self.fired:
            self.fired = True
            self.outcome.actions += self.nemesis.fire(self.fault, self.sh.app_id, self.sh.shuffle_id)

    def hold(self) -> None:
        self.nemesis.hold(self.fault, self.sh.app_id, self.sh.shuffle_id)


def run_shuffle(app: croupier.App, nemesis: Nemesis, fault: Fault, shape: Shape, salt: int) -> Outcome:
    """Register a shuffle, write it, read it back under ``fault``; what came of it.

    Raises:
        CroupierError: the master refused the shuffle or could not say where a copy lives.
    """
    sh = app.register_shuffle(num_mappers=shape.maps, num_partitions=shape.partitions)
    plans = [make_plan(salt, m, shape.map_bytes, shape.partitions) for m in range(shape.maps)]
    outcome = Outcome(fault, records=sum(len(p.records) for p in plans), maps=shape.maps)
    run = _Run(sh, nemesis, fault, plans, pools(salt, shape.maps), outcome)
    if _write(run):
        _read(run)
    outcome.fired = run.fired
    if fault.recovers and run.fired and not run.rerun:
        outcome.errors.append("both copies were killed, yet no read needed a rerun")
    try:
        sh.unregister()
    except CroupierError as exc:  # the files go with the app at the end anyway
        log.warning("unregistering %r: %s", sh, exc)
    return outcome


def _write(run: _Run) -> bool:
    """Write every map, firing the fault at a write phase; whether every map ended."""
    phase = run.fault.phase
    last = len(run.plans) - 1
    for plan in run.plans:
        if plan.map_id == last and phase == "after-close":
            run.fire()
        midpoint = len(plan.records) // 2 if plan.map_id == 1 and phase == "mid-push" else -1
        hold = run.hold if plan.map_id == last and phase == "during-commit" else None
        if not _write_map(run, plan, midpoint, hold):
            return False
    if phase == "during-commit":
        time.sleep(_COMMIT_SETTLE)
        run.fire()
    elif phase == "after-commit":
        _wait_committed(run.sh)
        if run.fault.kind == "all-gone":
            run.sh.wait_offloaded(_OFFLOAD_WAIT)
        run.fire()
    return True


def _write_map(
    run: _Run, plan: Plan, midpoint: int, hold: Callable[[], None] | None, first_attempt: int = 0
) -> bool:
    """One map, tried as new attempts (from ``first_attempt``) until one closes; False (and
    an error) if none did."""
    pool = run.pools[plan.map_id]
    for attempt in range(first_attempt, first_attempt + _TRIES):
        writer = (
            _HookedWriter(run.sh, plan.map_id, attempt, hold) if hold else run.sh.writer(plan.map_id, attempt)
        )
        try:
            with writer:
                for n, (partition, seq, length) in enumerate(plan.records):
                    if n == midpoint:
                        run.fire()
                    writer.write(partition, record_bytes(plan, pool, partition, seq, length))
            return True
        except CroupierError as exc:
            log.info("map %d attempt %d failed (%s); trying a new attempt", plan.map_id, attempt, exc)
            run.outcome.retries += 1
            hold = None  # the hold happened (or the map failed before it)
    run.outcome.errors.append(f"map {plan.map_id}: no attempt of {_TRIES} ended")
    return False


def _wait_committed(sh: croupier.Shuffle, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not sh.summary()["committed"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sh!r} did not commit within {timeout:g} s")
        time.sleep(0.05)


def _read(run: _Run) -> None:
    """Read and check every partition, the fault's partition in the middle."""
    target = run.fault.partition
    expected = expected_by_partition(run.plans, run.sh.num_partitions)
    order = [p for p in range(run.sh.num_partitions) if p != target]
    order.insert(len(order) // 2, target)
    for p in order:
        at_target = p == target and run.fault.phase == "mid-read"
        if at_target and run.fault.kind.startswith("corrupt"):
            run.fire()
        check = _read_partition(run, p, expected[p], run.fire if at_target else None)
        if check is not None:
            _account(run, p, check)


def _read_partition(
    run: _Run, p: int, expected: set[tuple[int, int]], after_first: Callable[[], None] | None
) -> PartitionCheck | None:
    """One partition's check, or None when it raised (counted in the outcome)."""
    out = run.outcome
    last: CroupierError | None = None
    for attempt in range(_TRIES):
        try:
            return check_partition(p, expected, _records(run.sh, p, after_first), run.pools)
        except DataLostError as exc:
            if run.fault.recovers and _recover(run, exc):
                continue
            if run.fault.double and p == run.fault.partition and p in exc.partitions:
                out.expected_data_lost += 1
            else:
                out.false_data_lost += 1
                out.problems.append(f"partition {p}: false DataLost: {exc}")
            return None
        except CroupierError as exc:
            log.info("reading partition %d (try %d) failed: %s", p, attempt, exc)
            out.retries += 1
            last = exc
    out.errors.append(f"partition {p}: {last!r}")
    return None


def _recover(run: _Run, exc: DataLostError) -> bool:
    """Rerun the maps a double-kill lost and write them again; whether that was done (False:
    the ``DataLost`` is not the fault's, or the rerun failed, noted as an error)."""
    killed = run.nemesis.killed
    if not run.fired or not exc.map_ids or not set(exc.workers) <= killed or set(exc.map_ids) <= run.rerun:
        return False
    out = run.outcome
    try:
        deadline = time.monotonic() + _LOST_WAIT
        while not set(exc.map_ids) <= set(lost := run.sh.lost_map_ids()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the master never named maps {exc.map_ids} lost")
            time.sleep(0.1)
        run.sh.rerun(lost)
    except (CroupierError, TimeoutError) as error:
        out.errors.append(f"rerun of maps {exc.map_ids}: {error!r}")
        return False
    out.actions.append(f"rerun of maps {lost} of {len(run.plans)}")
    out.expected_data_lost += 1
    out.rerun_maps += len(set(lost) - run.rerun)
    run.rerun |= set(lost)
    # new attempt ids: the ones before the rerun are refused
    return all(_write_map(run, run.plans[m], -1, None, first_attempt=_TRIES) for m in lost)


def _records(sh: croupier.Shuffle, p: int, after_first: Callable[[], None] | None) -> Iterator[bytes]:
    for n, record in enumerate(sh.reader(p)):
        yield record
        if n == 0 and after_first is not None:
            after_first()


def _account(run: _Run, p: int, check: PartitionCheck) -> None:
    out = run.outcome
    out.lost += check.lost
    out.duplicated += check.duplicated
    out.bad += check.bad
    out.problems += check.problems
    intact = not (check.lost or check.duplicated or check.bad)
    if run.fault.double and p == run.fault.partition and not intact:
        out.missed_data_lost += 1
        out.problems.append(f"partition {p}: both copies damaged, read back short without DataLost")
