"""The reader's pure logic: check chunks, keep each winning batch once, check completeness.

No sockets here, so every rule of DESIGN §8 is testable on plain lists:

- ``parse_chunk`` splits a chunk into batches and verifies the digests of the
  batches wanted (a losing attempt's bad batch is dropped unread, never a
  reason to give up a copy);
- ``BatchSelector`` drops batches of attempts that did not win and duplicates
  of ``(map, attempt, batch_id)`` (a revive resends the same ids to a new
  epoch; a second copy of an epoch repeats the first), remembers seals, and
  at the end asks ``core.proof`` whether everything arrived;
- ``select_records`` chains them over a list of chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from croupier.core.batch import BatchHeader, iter_batches, iter_records
from croupier.core.errors import BadRequest, DataLostError
from croupier.core.proof import Verdict, WinnerRuns, Winners, prove
from croupier.transports.digest import digest_ok

__all__ = [
    "BatchSelector",
    "CorruptChunk",
    "lost_error",
    "parse_chunk",
    "select_records",
    "split_records",
    "split_views",
]


class CorruptChunk(Exception):
    """A chunk is malformed or a batch's digest does not match: read the other copy."""


def parse_chunk(
    chunk: bytes | memoryview,
    wanted: Callable[[BatchHeader], bool] | None = None,
    key: bytes | None = None,
    damage: list[str] | None = None,
) -> list[tuple[BatchHeader, memoryview]]:
    """Split a chunk into ``(header, data)`` and verify the digest of each batch kept.

    Parameters:
        chunk: batches back to back.
        wanted: which batches to keep (default: all); the others are dropped unverified.
        key: the app key digests are keyed with (None: unkeyed). A batch forged without it
            fails like a corrupt one.
        damage: when given, what is wrong goes there instead of raising: a batch whose
            digest differs is left out and the chunk read on (every batch carries its own
            keyed digest, so the others stay trustworthy); a malformed rest of the chunk
            (a length that runs past its end, bad flags) ends it, keeping what came before.

    Raises:
        CorruptChunk: (without ``damage``) a header or batch is cut short, has bad flags,
            or a kept batch's digest differs.
    """
    out: list[tuple[BatchHeader, memoryview]] = []
    try:
        for offset, header, data in iter_batches(chunk):
            if wanted is not None and not wanted(header):
                continue
            if not digest_ok(header, data, key):
                why = (
                    f"digest mismatch in batch at offset {offset} (map {header.map_id} attempt "
                    f"{header.attempt_id} batch {header.batch_id})"
                )
                if damage is None:
                    raise CorruptChunk(why)
                damage.append(why)
                continue
            out.append((header, data))
    except BadRequest as exc:
        if damage is None:
            raise CorruptChunk(f"malformed chunk: {exc.message}") from exc
        damage.append(f"malformed chunk: {exc.message}")
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
        seals: map -> the batch counts its winning attempt sealed with (one, unless corrupt).

    Parameters:
        winners: ``winners[m]`` is the winning attempt of map ``m`` (``-1``: none): a
            list, or the locations reply's ``WinnerRuns``, looked up and never expanded.
    """

    def __init__(self, winners: Winners) -> None:
        self._winners: Winners = winners if isinstance(winners, WinnerRuns) else list(winners)
        self._maps = len(self._winners)
        # the winners of the maps whose batches came by, looked up once each (a WinnerRuns
        # lookup is a binary search, and every batch asks)
        self._attempts: dict[int, int] = {}
        self._seen: dict[int, set[int]] = {}
        self._seals: dict[int, set[int]] = {}
        self.kept = 0
        self.duplicates = 0

    def wanted(self, header: BatchHeader) -> bool:
        """Whether the batch (or seal) is from its map's winning attempt."""
        m = header.map_id
        attempt = self._attempts.get(m)
        if attempt is None:
            if not 0 <= m < self._maps:
                return False
            attempt = self._attempts[m] = self._winners[m]
        return header.attempt_id == attempt >= 0

    def is_new(self, header: BatchHeader) -> bool:
        """Whether ``offer`` would keep this batch (no state change)."""
        if header.is_seal or not self.wanted(header):
            return False
        return header.batch_id not in self._seen.get(header.map_id, ())

    def offer(self, header: BatchHeader) -> bool:
        """Account for one verified batch; True when its records are to be yielded."""
        if not self.wanted(header):
            return False
        m = header.map_id
        if header.is_seal:
            self._seals.setdefault(m, set()).add(header.batch_id)
            return False
        seen = self._seen.setdefault(m, set())
        if header.batch_id in seen:
            self.duplicates += 1
            return False
        seen.add(header.batch_id)
        self.kept += 1
        return True

    def verdict(self, partition: int, maps: Iterable[Sequence[int]] | None = None) -> Verdict:
        """The completeness proof over everything offered so far (``core.proof.prove``).

        Parameters:
            partition: the partition read.
            maps: the ``[lo, hi]`` ranges of the maps that declared it, or ``None`` if not known.
        """
        a = self._attempts  # every map offered was wanted, so looked up
        batches = ((m, a[m], b) for m, ids in self._seen.items() for b in ids)
        seals = ((m, a[m], n) for m, counts in self._seals.items() for n in counts)
        return prove(partition, self._winners, batches, seals, maps)

    def problems(self, maps: Iterable[Sequence[int]] | None = None) -> list[str]:
        """What is missing or inconsistent; empty when the partition is complete."""
        return [str(x) for x in self.verdict(0, maps).missing]

    def check(
        self,
        partition: int,
        workers: Iterable[str],
        context: str = "",
        maps: Iterable[Sequence[int]] | None = None,
    ) -> None:
        """Raise ``DataLostError`` naming the partition, the maps and ``workers`` if anything is missing."""
        verdict = self.verdict(partition, maps)
        if not verdict.complete:
            raise lost_error(verdict, list(workers), context)


def lost_error(verdict: Verdict, workers: list[str], context: str = "", why: str = "") -> DataLostError:
    """The ``DataLostError`` for an incomplete ``verdict``; ``why`` adds what went wrong with copies."""
    problems = [str(x) for x in verdict.missing]
    detail = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    prefix = f"{context}: " if context else ""
    suffix = f"; {why}" if why else ""
    return DataLostError.of(
        [verdict.partition], workers, f"{prefix}incomplete partition ({detail}{suffix})", maps=verdict.pairs
    )


def select_records(
    winners: Winners,
    chunks: Iterable[bytes | memoryview],
    *,
    partition: int = 0,
    workers: Iterable[str] = (),
    key: bytes | None = None,
) -> list[bytes]:
    """Every kept record of a partition's chunks (all epochs, in order), checked for completeness.

    Raises:
        CorruptChunk: a chunk failed to parse or verify.
        DataLostError: a winning attempt's batches are missing.
    """
    selector = BatchSelector(winners)
    out: list[bytes] = []
    for chunk in chunks:
        for header, data in parse_chunk(chunk, selector.wanted, key):
            if selector.is_new(header):
                records = split_records(data)
                selector.offer(header)
                out.extend(records)
            else:
                selector.offer(header)
    selector.check(partition, workers)
    return out
