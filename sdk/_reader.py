"""``Reader``: the records of one committed partition, each exactly once.

State:
    a ``BatchSelector`` (winners, batches kept, seals) for one pass over the
    partition; the locations read; counters.

The read path (DESIGN §8): wait until the shuffle is committed; then for every
epoch, oldest first, read one copy (the primary, else the replica, skipping
copies the commit found failed). A copy is read chunk by chunk with a few
fetches in flight. A copy that cannot be reached, or that its worker does not
know (``UNKNOWN_SHUFFLE``: lost files, a restart on damaged files, a stray
``DESTROY``) is abandoned for the other copy, which is read from its start:
batches are identified by ``(map, attempt, batch_id)``, so only those not yet
read are yielded and copies add up. A copy holding a bad digest of a winning
batch, or a malformed chunk, is read to its end first (every batch has its own
keyed digest: the intact ones count), then the other copy is read for what it
lacks; so a loss names only the maps whose batches no copy holds intact.

At the end ``core.proof`` decides whether the partition is complete: every
batch and the seal of each winning map that declared it (the locations reply's
``maps``). If not, every copy not read yet, of every epoch (those failed at
commit, and those of workers that registered again since, too), is read, and
the proof asked again; only then ``DataLostError`` names the partition, the
``(map, partition)`` pairs and the workers. Without ``maps`` (an older master)
only the maps seen can be checked, and an epoch whose every copy failed, other
than by not holding the location at all, is a loss, as before.

``readers(shuffle, partitions)`` reads many partitions in turn: one
``GET_LOCATIONS_BATCH`` for up to 10,000 of them, and while one partition is
consumed the next ones already have their first ``OPEN_STREAM`` and chunk on the
way, so a small partition costs no round trip of its own; or, by default, the first
copies of a group of readers come in one ``FETCH_SMALL`` per worker (``_small.py``).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from croupier._assemble import (
    BatchSelector,
    CorruptChunk,
    lost_error,
    parse_chunk,
    split_records,
    split_views,
)
from croupier._objects import ObjectCopyAbsent, ObjectCopyFailed, object_chunks
from croupier._routing import PartitionLocation, WorkerAddress
from croupier._small import SmallEntry, SmallFetch, send_small
from croupier.core.codec import from_json, to_json
from croupier.core.commands import MAX_PARTITIONS_PER_CALL, Command, GetLocations, GetLocationsBatch
from croupier.core.dataplane import (
    FetchChunk,
    FetchChunkReply,
    OpenStream,
    OpenStreamReply,
)
from croupier.core.enums import WorkerStatus
from croupier.core.errors import (
    BadRequest,
    CroupierError,
    DataLostError,
    NotCommitted,
    RequestTimeout,
    UnknownShuffle,
)
from croupier.core.proof import Verdict
from croupier.core.replies import LocationsBatchReply, LocationsReply, ShuffleReadState
from croupier.core.wire import MsgType
from croupier.transports.objstore import ObjectStore
from croupier.transports.rpc import Reply

if TYPE_CHECKING:
    from croupier._client import Shuffle

__all__ = ["Reader", "readers"]

log = logging.getLogger(__name__)

ReadState = TypeVar("ReadState", bound=ShuffleReadState)

_Results = queue.SimpleQueue[tuple[int, "Reply | None", "CroupierError | None"]]
_Box = queue.SimpleQueue[tuple["Reply | None", "CroupierError | None"]]


class _CopyFailed(Exception):
    """This copy cannot be read (unreachable, refused, corrupt): try the other one."""


class _CopyAbsent(_CopyFailed):
    """The worker does not hold this location, or never committed it."""


CopyKey = tuple[int, str, str | None]  # epoch, worker id, incarnation


class Reader:
    """Iterates the records (``bytes``) of one partition. Single use, one thread.

    Usage::

        for record in shuffle.reader(3):
            ...

    Parameters:
        shuffle: the shuffle read from.
        partition: ``0..num_partitions-1``.
        timeout: how long to wait for the commit, seconds (default: the client's
            ``commit_wait_timeout``).

    Raises (while iterating):
        NotCommitted: the shuffle did not commit within ``timeout``.
        DataLostError: even all copies together lack a winning attempt's batch or
            seal; it names the partition, the (map, partition) pairs and the workers.
    """

    def __init__(
        self,
        shuffle: Shuffle,
        partition: int,
        *,
        timeout: float | None = None,
        _locations: LocationsReply | None = None,
    ) -> None:
        if not 0 <= partition < shuffle.num_partitions:
            raise ValueError(f"partition {partition} is out of range 0..{shuffle.num_partitions - 1}")
        self.shuffle = shuffle
        self.partition = partition
        config = shuffle.client.config
        self._timeout = config.commit_wait_timeout if timeout is None else timeout
        self._ahead = max(1, config.fetch_chunks_in_flight)
        self._wait_reply = config.rpc_timeout * 2 + 10
        self._fetch_timeout = config.fetch_timeout
        self._lost_timeout = min(config.fetch_timeout, 2.0)
        self._started = False
        self.locations: list[PartitionLocation] = []
        self.stats: dict[str, int] = {"records": 0, "bytes": 0, "chunks": 0, "batches": 0, "switches": 0}
        self.selector: BatchSelector | None = None
        # one pass: the copies tried, what went wrong, and per epoch "read", "absent" or "failed"
        self._tried: set[CopyKey] = set()
        self._errors: list[str] = []
        self._failed_workers: set[str] = set()
        self._outcome: dict[int, str] = {}
        self._reply = _locations  # a committed locations reply, from readers()
        self._copy = True  # records as bytes; views() yields memory views instead
        # the first copy's OPEN_STREAM and chunk 0, sent ahead by start()
        self._ahead_of: tuple[int, str, str] | None = None
        self._ahead_open: _Box | None = None
        self._ahead_chunks: _Results | None = None
        # or the first copy's entry in a FETCH_SMALL that readers() sent (sdk/_small.py)
        self._ahead_small: tuple[SmallFetch, int] | None = None

    def __iter__(self) -> Iterator[bytes]:
        self._start_once()
        return cast(Iterator[bytes], self._records())

    def views(self) -> Iterator[memoryview]:
        """The records as memory views into the fetched chunks, without a copy; each stays
        valid as long as it is referenced. Instead of iterating the reader (single use)."""
        self._start_once()
        self._copy = False
        return cast(Iterator[memoryview], self._records())

    def _start_once(self) -> None:
        if self._started:
            raise RuntimeError("a Reader is iterated once; ask the shuffle for a new one")
        self._started = True

    def __repr__(self) -> str:
        sh = self.shuffle
        return f"Reader({sh.app_id}/{sh.shuffle_id} partition={self.partition})"

    # -- the read path ------------------------------------------------------------------------
    def _records(self) -> Iterator[bytes | memoryview]:
        reply = self._reply
        if reply is None:
            sh = self.shuffle
            command = GetLocations(sh.app_id, sh.shuffle_id, self.partition)
            reply = wait_committed(sh, command, LocationsReply, self._timeout)
        self._reply = None
        self.locations = list(reply.locations)
        workers = sorted({w for loc in self.locations for w in loc.workers})
        context = f"shuffle {self.shuffle.app_id}/{self.shuffle.shuffle_id}"
        maps = declared_maps(reply)
        if reply.lost:
            # The commit's verdict is a hint, not the proof: a copy it failed (its worker did not
            # answer in time, say) may still be readable. Read everything; the proof decides.
            log.warning(
                "%s partition %d: the commit lost data here; reading every copy", context, self.partition
            )
        selector = self.selector = BatchSelector(reply.winners)  # looked up in the runs
        if maps is not None and not maps:
            return  # no winning map declared the partition: it is empty, nothing to read
        failed = set(reply.failed_copies)
        for location in self.locations:
            yield from self._read_location(location, failed, selector, context)
        if self._complete(selector, maps):
            return
        yield from self._read_the_rest(selector, context)
        if not self._complete(selector, maps):
            raise self._lost(selector.verdict(self.partition, maps), workers, context)

    def _complete(self, selector: BatchSelector, maps: list[list[int]] | None) -> bool:
        """Whether the proof passes (and, without ``maps``, no epoch failed outright)."""
        if not selector.verdict(self.partition, maps).complete:
            return False
        return maps is not None or "failed" not in self._outcome.values()

    def _lost(self, verdict: Verdict, workers: list[str], context: str) -> DataLostError:
        named = sorted(self._failed_workers) or workers
        why = f"copies: {'; '.join(self._errors)}" if self._errors else ""
        if verdict.complete:  # without declared maps: an epoch none of whose copies could be read
            msg = f"{context}: no copy of some epoch could be read ({why})"
            return DataLostError.of([self.partition], named, msg)
        return lost_error(verdict, named, context, why)

    def start(self) -> None:
        """Send the first copy's ``OPEN_STREAM`` and chunk 0 now, before iteration (``readers``)."""
        first = self._first()
        if first is None:
            return
        location, role, address = first
        url, base, timeout = self._stream(location, role, address)
        self._ahead_chunks = queue.SimpleQueue()
        self._send(url, to_json(FetchChunk(*base, chunk=0)), 0, self._ahead_chunks)
        self._ahead_open = self._request_async(url, MsgType.OPEN_STREAM, to_json(OpenStream(*base)), timeout)
        self._ahead_of = (location.epoch, role, address.worker_id)

    def first_copy(self) -> tuple[str, str, tuple[int, int, str]] | None:
        """The fetch URL, incarnation and ``(partition, epoch, role)`` of the copy this reader
        reads first, for a FETCH_SMALL (``readers``); None when there is none to send ahead,
        or its worker is in doubt (then it waits for no batch)."""
        first = self._first()
        if first is None or self._doubtful(first[2]):
            return None
        location, role, address = first
        return address.fetch_url, address.incarnation or "", (self.partition, location.epoch, role)

    def take_small(self, fetch: SmallFetch, index: int) -> None:
        """Read the first copy from entry ``index`` of ``fetch`` (sent by ``readers``)."""
        first = self._first()
        assert first is not None
        location, role, address = first
        self._ahead_of = (location.epoch, role, address.worker_id)
        self._ahead_small = (fetch, index)

    def prepare(self) -> None:
        """Close to its turn (``readers``): if its FETCH_SMALL has answered that the first
        copy was skipped (too large), send its ``OPEN_STREAM`` and chunk 0 now, as ``start``."""
        small = self._ahead_small
        if small is None or not small[0].ready() or small[0].result(small[1]) is not None:
            return
        self._ahead_of = self._ahead_small = None
        self.start()

    def _first(self) -> tuple[PartitionLocation, str, WorkerAddress] | None:
        """The copy the first pass reads first, if it may be asked for before iteration."""
        reply = self._reply
        if reply is None or self._started or self._ahead_of is not None or reply.lost:
            return None
        if declared_maps(reply) == []:
            return None  # empty: nothing will be read
        failed = set(reply.failed_copies)
        for location in reply.locations:
            copies, _ = self._copies(location, failed)
            if copies and copies[0][1].known:
                return location, copies[0][0], copies[0][1]
            return None
        return None

    def _copies(
        self, location: PartitionLocation, failed: set[tuple[int, str]]
    ) -> tuple[list[tuple[str, WorkerAddress]], list[str]]:
        """The copies of ``location`` to try, in order, and why the others are not tried."""
        copies: list[tuple[str, WorkerAddress]] = []
        errors: list[str] = []
        for role, address in location.copies():
            if (location.epoch, address.worker_id) in failed:
                errors.append(f"{address.worker_id} ({role}): failed at commit")
                continue
            copies.append((role, address))
        # a copy on a worker the master declared lost, or that timed out lately, is tried
        # last (it may still answer)
        copies.sort(key=lambda c: self._doubtful(c[1]))
        return copies, errors

    def _doubtful(self, address: WorkerAddress) -> bool:
        return address.status == WorkerStatus.LOST or self.shuffle.client._suspected(address.worker_id)

    def _read_location(
        self,
        location: PartitionLocation,
        failed: set[tuple[int, str]],
        selector: BatchSelector,
        context: str,
    ) -> Iterator[bytes | memoryview]:
        """Read one copy of ``location``: the first that reads through, in order."""
        copies, errors = self._copies(location, failed)
        # copies failed at commit are read last, and only if the proof needs them
        self._errors.extend(f"epoch {location.epoch} {e}" for e in errors)
        self._failed_workers.update(w for e, w in failed if e == location.epoch and w in location.workers)
        if not copies:
            self._note(location.epoch, "failed")
        objects = self.shuffle.client._object_store()
        yield from self._read_copies(location, copies, objects, selector, context)

    def _read_copies(
        self,
        location: PartitionLocation,
        copies: list[tuple[str, WorkerAddress]],
        objects: ObjectStore | None,
        selector: BatchSelector,
        context: str,
    ) -> Iterator[bytes | memoryview]:
        """The worker copies in turn until one reads through, then the object copies."""
        if objects is not None and all(self._doubtful(a) or not a.known for _, a in copies):
            # every worker copy is in doubt (all workers gone after the offload): the store first
            if (yield from self._read_objects(objects, location, selector)):
                return
            objects = None
        for i, (role, address) in enumerate(copies):
            outcome = yield from self._try_copy(location, role, address, selector, context)
            self._note(location.epoch, outcome)
            if outcome == "read":
                return
            if i + 1 < len(copies):
                self.stats["switches"] += 1
        if objects is not None:
            yield from self._read_objects(objects, location, selector)
        # No copy could be read. Whether anything is missing is for the proof to say at the
        # end: a location created after its worker committed (a losing attempt's push after
        # every map ended) is never committed, and one nobody pushed to is unknown.

    def _read_the_rest(self, selector: BatchSelector, context: str) -> Iterator[bytes | memoryview]:
        """Read every copy not tried yet, of every epoch: also those failed at commit, and
        those of workers that registered again since the locations were read (a restarted
        worker serves its committed files under a new incarnation and new ports)."""
        locations = list(self.locations)
        sh = self.shuffle
        try:
            command = GetLocations(sh.app_id, sh.shuffle_id, self.partition)
            locations += sh.master.request(command, LocationsReply).locations
        except CroupierError as exc:
            log.warning("cannot refresh the locations of partition %d: %s", self.partition, exc)
        for location in locations:
            for role, address in location.copies():
                if (location.epoch, address.worker_id, address.incarnation) not in self._tried:
                    outcome = yield from self._try_copy(location, role, address, selector, context)
                    if outcome == "read":  # a failure here does not undo what the first pass found
                        self._note(location.epoch, outcome)

    def _try_copy(
        self,
        location: PartitionLocation,
        role: str,
        address: WorkerAddress,
        selector: BatchSelector,
        context: str,
    ) -> Generator[bytes | memoryview, None, str]:
        """Read one copy, yielding the batches not read yet; "read", or why not: "absent"
        (the worker does not hold it, or never committed it) or "failed"."""
        self._tried.add((location.epoch, address.worker_id, address.incarnation))
        try:
            yield from self._read_copy(location, role, address, selector)
        except _CopyFailed as exc:
            self._errors.append(f"epoch {location.epoch} {address.worker_id} ({role}): {exc}")
            self._failed_workers.add(address.worker_id)
            absent = isinstance(exc, _CopyAbsent)
            # an absent copy is most often a location nobody pushed to: no warning for that
            log.log(
                logging.INFO if absent else logging.WARNING,
                "%s partition %d epoch %d: %s copy on %s (incarnation %s) failed: %s",
                context,
                self.partition,
                location.epoch,
                role,
                address.worker_id,
                address.incarnation,
                exc,
            )
            return "absent" if absent else "failed"
        return "read"

    def _read_objects(
        self, objects: ObjectStore, location: PartitionLocation, selector: BatchSelector
    ) -> Generator[bytes | memoryview, None, bool]:
        """Read ``location`` from its object copies (issue 26), primary then replica; whether one
        read through. A damaged object fails like a damaged worker copy: the other is read."""
        sh = self.shuffle
        for role, _ in location.copies():
            where = f"epoch {location.epoch} object ({role})"
            damage: list[str] = []
            try:
                for chunk in object_chunks(
                    objects, sh.app_id, sh.shuffle_id, self.partition, location.epoch, role
                ):
                    yield from self._chunk_records(chunk, selector, damage)
                _check_damage(damage)
            except (ObjectCopyFailed, _CopyFailed) as exc:
                self._errors.append(f"{where}: {exc}")
                if not isinstance(exc, ObjectCopyAbsent):
                    log.warning("partition %d: %s failed: %s", self.partition, where, exc)
                continue
            self.stats["object_copies"] = self.stats.get("object_copies", 0) + 1
            self._note(location.epoch, "read")
            return True
        return False

    def _note(self, epoch: int, outcome: str) -> None:
        """Record how an epoch went: one copy read beats every failure; a real failure
        beats a copy the worker does not hold."""
        rank = {"absent": 0, "failed": 1, "read": 2}
        if rank[outcome] >= rank[self._outcome.get(epoch, "absent")]:
            self._outcome[epoch] = outcome

    def _read_copy(
        self, location: PartitionLocation, role: str, address: WorkerAddress, selector: BatchSelector
    ) -> Iterator[bytes | memoryview]:
        if not address.known:
            raise _CopyFailed("the worker is no longer registered")
        if self._ahead_of == (location.epoch, role, address.worker_id) and self._ahead_small is not None:
            fetch, index = self._ahead_small
            self._ahead_of = self._ahead_small = None
            entry = fetch.result(index)
            if entry is not None:  # else: skipped (too large, an older worker): read it as usual
                yield from self._read_small(entry, address.worker_id, selector)
                return
        url, base, timeout = self._stream(location, role, address)
        # Chunk 0 is asked for together with OPEN_STREAM rather than after it: one round
        # trip less per location, which is most of a small partition's cost. Its reply is
        # dropped when the location turns out empty or cannot be opened. start() may have
        # sent both already.
        if self._ahead_of == (location.epoch, role, address.worker_id):
            assert self._ahead_open is not None and self._ahead_chunks is not None
            box, results = self._ahead_open, self._ahead_chunks
        else:
            results = queue.SimpleQueue()
            self._send(url, to_json(FetchChunk(*base, chunk=0)), 0, results)
            box = self._request_async(url, MsgType.OPEN_STREAM, to_json(OpenStream(*base)), timeout)
        self._ahead_of = self._ahead_open = self._ahead_chunks = None
        try:
            opened = self._wait(url, box)
        except (UnknownShuffle, NotCommitted) as exc:
            # nothing pushed here, or never committed; or files lost, damaged or destroyed
            raise _CopyAbsent(f"{exc.code}: {exc.message}") from exc
        except CroupierError as exc:
            if isinstance(exc, RequestTimeout):
                self.shuffle.client._suspect(address.worker_id)
            raise _CopyFailed(f"{exc.code}: {exc.message}") from exc
        try:
            chunks = from_json(OpenStreamReply, opened.body).chunks
        except BadRequest as exc:
            raise _CopyFailed(f"malformed OPEN_STREAM reply from {url}: {exc.message}") from exc
        damage: list[str] = []
        for chunk in self._fetch(url, base, len(chunks), results, sent=1, worker_id=address.worker_id):
            yield from self._chunk_records(chunk, selector, damage)
        _check_damage(damage)

    def _read_small(
        self, entry: SmallEntry, worker_id: str, selector: BatchSelector
    ) -> Iterator[bytes | memoryview]:
        """A copy from its FETCH_SMALL entry: the whole copy is one chunk."""
        if entry.status == "absent":
            raise _CopyAbsent(entry.message)
        if entry.status != "ok" or entry.data is None:
            self.shuffle.client._suspect(worker_id)
            raise _CopyFailed(entry.message or "FETCH_SMALL failed")
        damage: list[str] = []
        yield from self._chunk_records(entry.data, selector, damage)
        _check_damage(damage)

    def _chunk_records(
        self, chunk: memoryview, selector: BatchSelector, damage: list[str]
    ) -> Iterator[bytes | memoryview]:
        """The records of the batches of ``chunk`` not read yet. A bad batch (digest, or a
        malformed rest of the chunk) goes to ``damage`` and the rest is still read: the copy
        fails only once read to its end (``_check_damage``), so a reader gets from it every
        batch that is intact, and from the other copy only what this one lacks."""
        self.stats["chunks"] += 1
        try:
            batches = parse_chunk(chunk, selector.wanted, self.shuffle.app_key, damage)
            for header, data in batches:
                if selector.is_new(header):
                    records: list[bytes] | list[memoryview] = (
                        split_records(data) if self._copy else split_views(data)
                    )
                    selector.offer(header)
                    self.stats["batches"] += 1
                    for record in records:
                        self.stats["records"] += 1
                        self.stats["bytes"] += len(record)
                        yield record
                else:
                    selector.offer(header)
        except CorruptChunk as exc:
            raise _CopyFailed(str(exc)) from exc

    def _fetch(
        self,
        url: str,
        base: tuple[str, int, int, int, str, str],
        count: int,
        results: _Results,
        *,
        sent: int,
        worker_id: str,
    ) -> Iterator[memoryview]:
        """The copy's chunks in order, with up to ``fetch_chunks_in_flight`` requests ahead.

        The first ``sent`` chunks were already asked for, with their replies due on ``results``.
        """
        ready: dict[int, tuple[Reply | None, CroupierError | None]] = {}
        for index in range(count):
            while sent < count and sent < index + self._ahead:
                self._send(url, to_json(FetchChunk(*base, chunk=sent)), sent, results)
                sent += 1
            while index not in ready:
                try:
                    i, reply, error = results.get(timeout=self._wait_reply)
                except queue.Empty:
                    self.shuffle.client._suspect(worker_id)
                    raise _CopyFailed(f"no reply to FETCH_CHUNK {index} from {url}") from None
                ready[i] = (reply, error)
            reply, error = ready.pop(index)
            if error is not None:
                if isinstance(error, RequestTimeout):
                    self.shuffle.client._suspect(worker_id)
                raise _CopyFailed(f"chunk {index}: {error.code}: {error.message}")
            if reply is None or not reply.payloads:
                raise _CopyFailed(f"chunk {index}: the reply carries no data")
            try:
                length = from_json(FetchChunkReply, reply.body).length
            except BadRequest as exc:
                raise _CopyFailed(f"chunk {index}: malformed FETCH_CHUNK reply: {exc.message}") from exc
            if length != len(reply.payloads[0]):
                raise _CopyFailed(f"chunk {index}: {len(reply.payloads[0])} bytes arrived, not {length}")
            yield reply.payloads[0]

    def _send(
        self,
        url: str,
        body: dict[str, Any],
        index: int,
        results: _Results,
    ) -> None:
        def callback(reply: Reply | None, error: CroupierError | None) -> None:
            results.put((index, reply, error))

        self.shuffle.client._send(
            url, int(MsgType.FETCH_CHUNK), body, [], callback, timeout=self._fetch_timeout
        )

    def _stream(
        self, location: PartitionLocation, role: str, address: WorkerAddress
    ) -> tuple[str, tuple[str, int, int, int, str, str], float]:
        """The fetch URL, the stream's ids and the reply timeout for one copy."""
        sh = self.shuffle
        incarnation = address.incarnation or ""  # known: only known addresses are read
        base = (sh.app_id, sh.shuffle_id, self.partition, location.epoch, role, incarnation)
        timeout = self._lost_timeout if self._doubtful(address) else self._fetch_timeout
        return address.fetch_url, base, timeout

    def _request_async(self, url: str, msg_type: int, body: dict[str, Any], timeout: float) -> _Box:
        box: _Box = queue.SimpleQueue()
        self.shuffle.client._send(url, msg_type, body, [], lambda r, e: box.put((r, e)), timeout=timeout)
        return box

    def _wait(self, url: str, box: _Box) -> Reply:
        try:
            reply, error = box.get(timeout=self._wait_reply)
        except queue.Empty:
            raise RequestTimeout(f"no reply from {url}") from None
        if error is not None:
            raise error
        assert reply is not None
        return reply


def _check_damage(damage: list[str]) -> None:
    """Fail a copy read to its end that had bad batches: the other copy is read for them."""
    if damage:
        more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
        raise _CopyFailed(f"{damage[0]}{more}")


def declared_maps(reply: LocationsReply) -> list[list[int]] | None:
    """The ``[lo, hi]`` ranges of the maps that declared the partition, or ``None`` when the
    master does not say (one from before the field)."""
    return None if reply.maps is None else [[lo, hi] for lo, hi in reply.maps]


def wait_committed(
    shuffle: Shuffle, command: Command, reply_type: type[ReadState], timeout: float
) -> ReadState:
    """Ask ``command`` (a locations call) until the shuffle is committed; its committed reply.

    Raises:
        NotCommitted: not committed within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        reply = shuffle.master.request(command, reply_type)
        if reply.committed:
            return reply
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ended = reply.winners.ended
            partition = getattr(command, "partition", None)
            raise NotCommitted(
                f"shuffle {shuffle.app_id}/{shuffle.shuffle_id} is not committed after {timeout:g} s "
                f"({ended} of {reply.num_mappers} maps ended)",
                {"partition": partition, "maps_ended": ended},
            )
        time.sleep(min(pause, remaining))
        pause = min(1.0, pause * 2)


SMALL_BATCH = 128  # readers whose first copies readers() asks for together (FETCH_SMALL)


def readers(
    shuffle: Shuffle,
    partitions: Iterable[int],
    *,
    timeout: float | None = None,
    ahead: int = 2,
    small_batch: int = SMALL_BATCH,
) -> Iterator[Reader]:
    """A ``Reader`` for each of ``partitions``, in order, each reading ahead of its turn.

    The locations come ``MAX_PARTITIONS_PER_CALL`` partitions per master call, once the
    shuffle is committed. The ``ahead`` readers after the one handed out have sent their
    first ``OPEN_STREAM`` and chunk request; with ``small_batch`` > 0 the readers are
    made ``small_batch`` at a time instead (the next group once half of one is handed
    out), and the first copies of each group are asked for in one ``FETCH_SMALL`` per
    worker: a small copy comes whole in that reply, a larger one is read as usual. A
    reader that is skipped (never iterated) costs only those requests.
    """
    parts = list(partitions)
    for p in parts:
        if not 0 <= p < shuffle.num_partitions:
            raise ValueError(f"partition {p} is out of range 0..{shuffle.num_partitions - 1}")
    return _readers(shuffle, parts, timeout, ahead, small_batch)


def _readers(
    shuffle: Shuffle, parts: list[int], timeout: float | None, ahead: int, small_batch: int
) -> Iterator[Reader]:
    config = shuffle.client.config
    wait = config.commit_wait_timeout if timeout is None else timeout
    replies: deque[LocationsReply] = deque()
    fetched = 0

    def make(index: int) -> Reader:
        nonlocal fetched
        if not replies:
            batch = tuple(parts[fetched : fetched + MAX_PARTITIONS_PER_CALL])
            fetched += len(batch)
            command = GetLocationsBatch(shuffle.app_id, shuffle.shuffle_id, batch)
            replies.extend(wait_committed(shuffle, command, LocationsBatchReply, wait).split())
        return Reader(shuffle, parts[index], timeout=timeout, _locations=replies.popleft())

    window: deque[Reader] = deque()
    made = 0
    group = max(0, small_batch)
    for _ in range(len(parts)):
        if group:
            while made < len(parts) and len(window) <= max(ahead, group // 2):
                made_now = [make(i) for i in range(made, min(len(parts), made + group))]
                made += len(made_now)
                send_small(shuffle, made_now)
                window.extend(made_now)
            for i in range(min(len(window) - 1, max(0, ahead))):
                window[i + 1].prepare()  # the next ones after the reader handed out now
        else:
            while made < len(parts) and len(window) <= max(0, ahead):
                reader = make(made)
                reader.start()
                window.append(reader)
                made += 1
        yield window.popleft()
