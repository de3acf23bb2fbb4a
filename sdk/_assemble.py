"""The reader's pure logic: check chunks, keep each winning batch once, check completeness.

No sockets here, so every rule of DESIGN §8 is testable on plain lists:

- ``parse_chunk`` splits a chunk into batches and verifies every digest;
- ``BatchSelector`` drops batches of attempts that did not win and duplicates
  of ``(map, attempt, batch_id)`` (a revive resends the same ids to a new
  epoch), remembers seals, and at the end checks that each winning attempt's
  batches ``0..n-1`` all arrived;
- ``select_records`` chains them over a list of chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from croupier.core.batch import BatchHeader, iter_batches, iter_records
from croupier.core.errors import BadRequest, DataLostError
from croupier.transports.digest import digest_ok

__all__ = ["BatchSelector", "CorruptChunk", "parse_chunk", "select_records", "split_records"]


class CorruptChunk(Exception):
    """A chunk is malformed or a batch's digest does not match: read the other copy."""


def parse_chunk(chunk: bytes | memoryview) -> list[tuple[BatchHeader, memoryview]]:
    """Split a chunk into ``(header, data)`` and verify every batch's blake3 digest.

    Raises:
        CorruptChunk: a header or batch is cut short, has bad flags, or a digest differs.
    """
    out: list[tuple[BatchHeader, memoryview]] = []
    try:
        for offset, header, data in iter_batches(chunk):
            if not digest_ok(header, data):
                raise CorruptChunk(
                    f"digest mismatch in batch at offset {offset} (map {header.map_id} attempt "
                    f"{header.attempt_id} batch {header.batch_id})"
                )
            out.append((header, data))
    except BadRequest as exc:
        raise CorruptChunk(f"malformed chunk: {exc.message}") from exc
    return out


def split_records(data: bytes | memoryview) -> list[bytes]:
    """A verified batch's records as ``bytes``.

    Raises:
        CorruptChunk: a record runs past the end of the batch.
    """
    return [bytes(r) for r in split_views(data)]


def split_views(data: bytes | memoryview) -> list[memoryview]:
    """A verified batch's records as views into ``data`` (no copy).

    Raises:
        CorruptChunk: a record runs past the end of the batch.
    """
    try:
        return list(iter_records(data))
    except BadRequest as exc:
        raise CorruptChunk(f"malformed records: {exc.message}") from exc


class BatchSelector:
    """Which batches of one partition a reader keeps.

    State:
        seen: map -> data batch ids kept (winning attempt only).
        seals: map -> the batch count its winning attempt sealed with.

    Parameters:
        winners: ``winners[m]`` is the winning attempt of map ``m`` (``-1``: none).
    """

    def __init__(self, winners: Sequence[int]) -> None:
        self._winners = list(winners)
        self._seen: dict[int, set[int]] = {}
        self._seals: dict[int, int] = {}
        self._conflicts: list[str] = []
        self.kept = 0
        self.duplicates = 0

    def _winning(self, header: BatchHeader) -> bool:
        m = header.map_id
        return m < len(self._winners) and header.attempt_id == self._winners[m] >= 0

    def is_new(self, header: BatchHeader) -> bool:
        """Whether ``offer`` would keep this batch (no state change)."""
        if header.is_seal or not self._winning(header):
            return False
        return header.batch_id not in self._seen.get(header.map_id, ())

    def offer(self, header: BatchHeader) -> bool:
        """Account for one verified batch; True when its records are to be yielded."""
        if not self._winning(header):
            return False
        m = header.map_id
        if header.is_seal:
            known = self._seals.setdefault(m, header.batch_id)
            if known != header.batch_id:
                self._conflicts.append(f"map {m} sealed with {known} and {header.batch_id} batches")
            return False
        seen = self._seen.setdefault(m, set())
        if header.batch_id in seen:
            self.duplicates += 1
            return False
        seen.add(header.batch_id)
        self.kept += 1
        return True

    def problems(self) -> list[str]:
        """What is missing or inconsistent; empty when the partition is complete."""
        out = list(self._conflicts)
        for m in sorted(set(self._seen) | set(self._seals)):
            attempt = self._winners[m]
            seen = self._seen.get(m, set())
            count = self._seals.get(m)
            if count is None:
                out.append(f"map {m} attempt {attempt}: {len(seen)} batches but no seal")
                continue
            missing = [b for b in range(count) if b not in seen]
            if missing:
                shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
                out.append(f"map {m} attempt {attempt}: {len(missing)} of {count} batches missing ({shown})")
            extra = sorted(b for b in seen if b >= count)
            if extra:
                out.append(f"map {m} attempt {attempt}: batches {extra[:10]} beyond its seal of {count}")
        return out

    def check(self, partition: int, workers: Iterable[str], context: str = "") -> None:
        """Raise ``DataLostError`` naming the partition and ``workers`` if anything is missing."""
        problems = self.problems()
        if problems:
            detail = "; ".join(problems[:5]) + (
                f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            )
            prefix = f"{context}: " if context else ""
            raise DataLostError.of([partition], list(workers), f"{prefix}incomplete partition ({detail})")


def select_records(
    winners: Sequence[int],
    chunks: Iterable[bytes | memoryview],
    *,
    partition: int = 0,
    workers: Iterable[str] = (),
) -> list[bytes]:
    """Every kept record of a partition's chunks (all epochs, in order), checked for completeness.

    Raises:
        CorruptChunk: a chunk failed to parse or verify.
        DataLostError: a winning attempt's batches are missing.
    """
    selector = BatchSelector(winners)
    out: list[bytes] = []
    for chunk in chunks:
        for header, data in parse_chunk(chunk):
            if selector.is_new(header):
                records = split_records(data)
                selector.offer(header)
                out.extend(records)
            else:
                selector.offer(header)
    selector.check(partition, workers)
    return out
