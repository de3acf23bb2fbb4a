"""The records ``croupier verify`` writes and how it checks what it reads back.

No state and no threads: a plan is a pure function of ``(salt, map_id)``, so the
writer and the checker compute the same records without sharing anything.

Record layout (inside the SDK's record framing)::

    u32 map_id, u32 partition, u32 seq, u32 payload_len, payload

The payload of ``(map, seq)`` is a slice of a per-map pseudo-random pool starting at
a position derived from ``seq``, so every byte is checked, not only the header.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "PartitionCheck",
    "Plan",
    "check_partition",
    "expected_by_partition",
    "make_plan",
    "pools",
    "record_bytes",
]

_HEADER = struct.Struct("<IIII")
_POOL_BYTES = 64 * 1024
_MIN_PAYLOAD = 16
_MAX_PAYLOAD = 2048


@dataclass(frozen=True, slots=True)
class Plan:
    """One map's records: ``(partition, seq, payload_len)`` in write order."""

    map_id: int
    salt: int
    records: tuple[tuple[int, int, int], ...]


def _pool(salt: int, map_id: int) -> bytes:
    return random.Random(salt * 1_000_003 + map_id).randbytes(_POOL_BYTES)


def _offset(seq: int, length: int) -> int:
    return (seq * 7_919) % (_POOL_BYTES - length)


def make_plan(salt: int, map_id: int, budget: int, partitions: int) -> Plan:
    """The records of map ``map_id`` of the shuffle seeded ``salt``, about ``budget`` bytes,
    spread over every partition (the first ``partitions`` records hit each one once)."""
    rng = random.Random(salt * 7_717 + map_id)
    records: list[tuple[int, int, int]] = []
    used = 0
    seq = 0
    while used < budget or seq < partitions:
        partition = seq if seq < partitions else rng.randrange(partitions)
        length = rng.randint(_MIN_PAYLOAD, _MAX_PAYLOAD)
        records.append((partition, seq, length))
        used += _HEADER.size + length
        seq += 1
    return Plan(map_id, salt, tuple(records))


def record_bytes(plan: Plan, pool: bytes, partition: int, seq: int, length: int) -> bytes:
    """The bytes of one record of ``plan`` (``pool`` is the map's pool, see ``pools``)."""
    start = _offset(seq, length)
    return _HEADER.pack(plan.map_id, partition, seq, length) + pool[start : start + length]


def pools(salt: int, maps: int) -> list[bytes]:
    """Every map's payload pool for the shuffle seeded ``salt``."""
    return [_pool(salt, m) for m in range(maps)]


def expected_by_partition(plans: Iterable[Plan], partitions: int) -> list[set[tuple[int, int]]]:
    """For each partition, the ``(map, seq)`` pairs the ``plans`` write there."""
    out: list[set[tuple[int, int]]] = [set() for _ in range(partitions)]
    for plan in plans:
        for partition, seq, _ in plan.records:
            out[partition].add((plan.map_id, seq))
    return out


@dataclass(slots=True)
class PartitionCheck:
    """What one partition read back, against what its maps wrote.

    ``lost`` records were written (and acknowledged) but not read; ``duplicated``
    were read more than once; ``bad`` are records with a wrong header or wrong bytes.
    """

    partition: int
    expected: int
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    bad: int = 0
    problems: list[str] = field(default_factory=list)


def check_partition(
    partition: int, expected: set[tuple[int, int]], records: Iterable[bytes], maps: list[bytes]
) -> PartitionCheck:
    """Compare the ``records`` read from ``partition`` with the ``(map, seq)`` pairs expected
    there; ``maps`` are the payload pools (their count bounds the map ids)."""
    result = PartitionCheck(partition, len(expected))
    seen: Counter[tuple[int, int]] = Counter()
    verdict = _record_checker(partition, maps)
    for record in records:
        result.read += 1
        problem = verdict(record)
        if problem:
            result.bad += 1
            _note(result, problem)
            continue
        m, _, seq, _ = _HEADER.unpack_from(record)
        seen[(m, seq)] += 1
    unexpected = set(seen) - expected
    for key in sorted(unexpected):
        result.bad += seen.pop(key)
        _note(result, f"partition {partition}: map {key[0]} seq {key[1]} was never written here")
    result.duplicated = sum(n - 1 for n in seen.values())
    missing = expected - set(seen)
    result.lost = len(missing)
    if missing:
        by_map = Counter(m for m, _ in missing)
        _note(result, f"partition {partition}: lost {dict(sorted(by_map.items()))} (map: records)")
    if result.duplicated:
        _note(result, f"partition {partition}: {result.duplicated} records read twice")
    return result


def _record_checker(partition: int, maps: list[bytes]) -> Callable[[bytes], str]:
    """A function that returns what is wrong with one record ('' when nothing is)."""

    def problem(record: bytes) -> str:
        if len(record) < _HEADER.size:
            return f"partition {partition}: a {len(record)}-byte record is too short"
        m, p, seq, length = _HEADER.unpack_from(record)
        if p != partition or m >= len(maps) or len(record) != _HEADER.size + length:
            return f"partition {partition}: record of map {m} seq {seq} is malformed or misplaced"
        start = _offset(seq, length)
        if record[_HEADER.size :] != maps[m][start : start + length]:
            return f"partition {partition}: map {m} seq {seq} has wrong bytes"
        return ""

    return problem


def _note(result: PartitionCheck, problem: str) -> None:
    if len(result.problems) < 5:  # a broken partition says enough in a few lines
        result.problems.append(problem)
