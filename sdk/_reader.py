"""``Reader``: the records of one committed partition, each exactly once.

State:
    a ``BatchSelector`` (winners, batches kept, seals) for one pass over the
    partition; the locations read; counters.

The read path (DESIGN §8): wait until the shuffle is committed; then for every
epoch, oldest first, read one copy (the primary, else the replica, skipping
copies the commit found failed). A copy is read chunk by chunk with a few
fetches in flight. A copy that cannot be reached, or that holds a malformed
chunk or a bad digest, is abandoned for the other copy, which is read from its
start (chunk boundaries differ between copies; batches already kept are not
kept twice). ``UNKNOWN_SHUFFLE`` from a copy means nothing was pushed there.

``readers(shuffle, partitions)`` reads many partitions in turn: one
``GET_LOCATIONS_BATCH`` for up to 10,000 of them, and while one partition is
consumed the next ones already have their first ``OPEN_STREAM`` and chunk on the
way, so a small partition costs no round trip of its own.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from croupier._assemble import BatchSelector, CorruptChunk, parse_chunk, split_records, split_views
from croupier._routing import PartitionLocation, WorkerAddress
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
from croupier.core.replies import LocationsBatchReply, LocationsReply, ShuffleReadState
from croupier.core.wire import MsgType
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


class _CopyNotCommitted(_CopyFailed):
    """The worker holds this location but never committed it."""


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
        DataLostError: every copy of some location failed, or a winning attempt's
            batches are missing; it names the partition and the workers.
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
        self._reply = _locations  # a committed locations reply, from readers()
        self._copy = True  # records as bytes; views() yields memory views instead
        # the first copy's OPEN_STREAM and chunk 0, sent ahead by start()
        self._ahead_of: tuple[int, str, str] | None = None
        self._ahead_open: _Box | None = None
        self._ahead_chunks: _Results | None = None

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
        if reply.lost:
            raise DataLostError.of([self.partition], workers, f"{context}: every copy failed at commit")
        failed = set(reply.failed_copies)
        selector = self.selector = BatchSelector(list(reply.winners))
        for location in self.locations:
            yield from self._read_location(location, failed, selector, context)
        selector.check(self.partition, workers, context)

    def start(self) -> None:
        """Send the first copy's ``OPEN_STREAM`` and chunk 0 now, before iteration (``readers``)."""
        reply = self._reply
        if reply is None or self._started or self._ahead_of is not None or reply.lost:
            return
        failed = set(reply.failed_copies)
        for location in reply.locations:
            copies, _ = self._copies(location, failed)
            if copies:
                role, address = copies[0]
                if address.known:
                    url, base, timeout = self._stream(location, role, address)
                    self._ahead_chunks = queue.SimpleQueue()
                    self._send(url, to_json(FetchChunk(*base, chunk=0)), 0, self._ahead_chunks)
                    self._ahead_open = self._request_async(
                        url, MsgType.OPEN_STREAM, to_json(OpenStream(*base)), timeout
                    )
                    self._ahead_of = (location.epoch, role, address.worker_id)
            return

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
        copies, errors = self._copies(location, failed)
        not_committed = 0
        tried = list(copies)
        for i, (role, address) in enumerate(copies):
            try:
                yield from self._read_copy(location, role, address, selector)
                return
            except _CopyFailed as exc:
                not_committed += isinstance(exc, _CopyNotCommitted)
                errors.append(f"{address.worker_id} ({role}): {exc}")
                if i + 1 < len(copies):
                    self.stats["switches"] += 1
                    log.warning(
                        "%s partition %d epoch %d: %s copy on %s failed (%s); reading the other copy",
                        context,
                        self.partition,
                        location.epoch,
                        role,
                        address.worker_id,
                        exc,
                    )
        if copies and not_committed == len(copies) == len(errors):
            # Every copy is held open but uncommitted, and none failed at commit: the
            # location was created after its worker committed the shuffle (a losing
            # attempt's push or revive after every map ended). A winner's pushes are all
            # acked before its MapperEnd, hence before the commit: losers only.
            log.warning(
                "%s partition %d epoch %d: no copy was committed; it can only hold losing attempts",
                context,
                self.partition,
                location.epoch,
            )
            return
        if (yield from self._read_moved(location, tried, selector, context, errors)):
            return
        raise DataLostError.of(
            [self.partition],
            location.workers,
            f"{context} epoch {location.epoch}: no copy could be read ({'; '.join(errors)})",
        )

    def _read_moved(
        self,
        location: PartitionLocation,
        tried: list[tuple[str, WorkerAddress]],
        selector: BatchSelector,
        context: str,
        errors: list[str],
    ) -> Generator[bytes | memoryview, None, bool]:
        """Read a copy whose worker re-registered since ``tried`` was read; False if none could be."""
        # A worker that restarted since the locations were read serves its committed
        # files under a new incarnation and new ports: ask the master once more.
        for role, address in self._moved(location, tried):
            try:
                log.warning(
                    "%s partition %d epoch %d: %s copy on %s moved (incarnation %s); reading it there",
                    context,
                    self.partition,
                    location.epoch,
                    role,
                    address.worker_id,
                    address.incarnation,
                )
                yield from self._read_copy(location, role, address, selector)
                return True
            except _CopyFailed as exc:
                errors.append(f"{address.worker_id} ({role}, after it re-registered): {exc}")
        return False

    def _moved(
        self, location: PartitionLocation, tried: list[tuple[str, WorkerAddress]]
    ) -> list[tuple[str, WorkerAddress]]:
        """The copies of ``location`` whose worker re-registered since ``tried`` was read."""
        sh = self.shuffle
        try:
            command = GetLocations(sh.app_id, sh.shuffle_id, self.partition)
            reply = sh.client._master.request(command, LocationsReply)
        except CroupierError as exc:
            log.warning("cannot refresh the locations of partition %d: %s", self.partition, exc)
            return []
        before = {address.worker_id: address for _, address in tried}
        moved: list[tuple[str, WorkerAddress]] = []
        for fresh in reply.locations:
            if fresh.epoch != location.epoch:
                continue
            for role, address in fresh.copies():
                old = before.get(address.worker_id)
                if old is not None and address.incarnation != old.incarnation:
                    moved.append((role, address))
        return moved

    def _read_copy(
        self, location: PartitionLocation, role: str, address: WorkerAddress, selector: BatchSelector
    ) -> Iterator[bytes | memoryview]:
        if not address.known:
            raise _CopyFailed("the worker is no longer registered")
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
        except UnknownShuffle:
            return  # nothing was ever pushed to this location
        except NotCommitted as exc:
            raise _CopyNotCommitted(f"{exc.code}: {exc.message}") from exc
        except CroupierError as exc:
            if isinstance(exc, RequestTimeout):
                self.shuffle.client._suspect(address.worker_id)
            raise _CopyFailed(f"{exc.code}: {exc.message}") from exc
        try:
            chunks = from_json(OpenStreamReply, opened.body).chunks
        except BadRequest as exc:
            raise _CopyFailed(f"malformed OPEN_STREAM reply from {url}: {exc.message}") from exc
        for chunk in self._fetch(url, base, len(chunks), results, sent=1, worker_id=address.worker_id):
            self.stats["chunks"] += 1
            try:
                batches = parse_chunk(chunk)
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
        reply = shuffle.client._master.request(command, reply_type)
        if reply.committed:
            return reply
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ended = sum(1 for w in reply.winners if w >= 0)
            partition = getattr(command, "partition", None)
            raise NotCommitted(
                f"shuffle {shuffle.app_id}/{shuffle.shuffle_id} is not committed after {timeout:g} s "
                f"({ended} of {reply.num_mappers} maps ended)",
                {"partition": partition, "maps_ended": ended},
            )
        time.sleep(min(pause, remaining))
        pause = min(1.0, pause * 2)


def readers(
    shuffle: Shuffle, partitions: Iterable[int], *, timeout: float | None = None, ahead: int = 2
) -> Iterator[Reader]:
    """A ``Reader`` for each of ``partitions``, in order, each reading ahead of its turn.

    The locations come ``MAX_PARTITIONS_PER_CALL`` partitions per master call, once the
    shuffle is committed. The ``ahead`` readers after the one handed out have sent their
    first ``OPEN_STREAM`` and chunk request. A reader that is skipped (never iterated)
    costs only those requests.
    """
    parts = list(partitions)
    for p in parts:
        if not 0 <= p < shuffle.num_partitions:
            raise ValueError(f"partition {p} is out of range 0..{shuffle.num_partitions - 1}")
    return _readers(shuffle, parts, timeout, ahead)


def _readers(shuffle: Shuffle, parts: list[int], timeout: float | None, ahead: int) -> Iterator[Reader]:
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
        reader = Reader(shuffle, parts[index], timeout=timeout, _locations=replies.popleft())
        reader.start()
        return reader

    window: deque[Reader] = deque()
    made = 0
    for _ in range(len(parts)):
        while made < len(parts) and len(window) <= max(0, ahead):
            window.append(make(made))
            made += 1
        yield window.popleft()
