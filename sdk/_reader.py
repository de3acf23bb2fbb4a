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
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from croupier._assemble import BatchSelector, CorruptChunk, parse_chunk, split_records
from croupier._routing import Location, WorkerAddress, location_from_reply
from croupier.core.codec import to_json
from croupier.core.commands import GetLocations
from croupier.core.dataplane import PRIMARY, REPLICA, FetchChunk, OpenStream
from croupier.core.errors import CroupierError, DataLostError, NotCommitted, RequestTimeout, UnknownShuffle
from croupier.core.wire import MsgType
from croupier.transports.rpc import Reply

if TYPE_CHECKING:
    from croupier._client import Shuffle

__all__ = ["Reader"]

log = logging.getLogger(__name__)


_Results = queue.SimpleQueue[tuple[int, "Reply | None", "CroupierError | None"]]


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

    def __init__(self, shuffle: Shuffle, partition: int, *, timeout: float | None = None) -> None:
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
        self.locations: list[Location] = []
        self.stats: dict[str, int] = {"records": 0, "bytes": 0, "chunks": 0, "batches": 0, "switches": 0}
        self.selector: BatchSelector | None = None

    def __iter__(self) -> Iterator[bytes]:
        if self._started:
            raise RuntimeError("a Reader is iterated once; ask the shuffle for a new one")
        self._started = True
        return self._records()

    def __repr__(self) -> str:
        sh = self.shuffle
        return f"Reader({sh.app_id}/{sh.shuffle_id} partition={self.partition})"

    # -- the read path ------------------------------------------------------------------------
    def _records(self) -> Iterator[bytes]:
        reply = self._wait_committed()
        self.locations = [location_from_reply(e) for e in reply["locations"]]
        workers = sorted({w for loc in self.locations for w in loc.workers})
        context = f"shuffle {self.shuffle.app_id}/{self.shuffle.shuffle_id}"
        if reply.get("lost"):
            raise DataLostError.of([self.partition], workers, f"{context}: every copy failed at commit")
        failed = {(int(e), str(w)) for e, w in reply.get("failed_copies", [])}
        selector = self.selector = BatchSelector([int(a) for a in reply["winners"]])
        for location in self.locations:
            yield from self._read_location(location, failed, selector, context)
        selector.check(self.partition, workers, context)

    def _wait_committed(self) -> dict[str, Any]:
        sh = self.shuffle
        command = GetLocations(sh.app_id, sh.shuffle_id, self.partition)
        deadline = time.monotonic() + self._timeout
        pause = 0.02
        while True:
            reply = sh.client._master.call(command)
            if reply["committed"]:
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                ended = sum(1 for w in reply["winners"] if w >= 0)
                raise NotCommitted(
                    f"shuffle {sh.app_id}/{sh.shuffle_id} is not committed after {self._timeout:g} s "
                    f"({ended} of {reply['num_mappers']} maps ended)",
                    {"partition": self.partition, "maps_ended": ended},
                )
            time.sleep(min(pause, remaining))
            pause = min(1.0, pause * 2)

    def _read_location(
        self, location: Location, failed: set[tuple[int, str]], selector: BatchSelector, context: str
    ) -> Iterator[bytes]:
        copies: list[tuple[str, WorkerAddress]] = []
        errors: list[str] = []
        for role, address in ((PRIMARY, location.primary), (REPLICA, location.replica)):
            if address is None:
                continue
            if (location.epoch, address.worker_id) in failed:
                errors.append(f"{address.worker_id} ({role}): failed at commit")
                continue
            copies.append((role, address))
        # a copy on a worker the master declared lost is tried last (it may still answer)
        copies.sort(key=lambda c: c[1].status == "lost")
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
                return
            except _CopyFailed as exc:
                errors.append(f"{address.worker_id} ({role}, after it re-registered): {exc}")
        raise DataLostError.of(
            [self.partition],
            location.workers,
            f"{context} epoch {location.epoch}: no copy could be read ({'; '.join(errors)})",
        )

    def _moved(
        self, location: Location, tried: list[tuple[str, WorkerAddress]]
    ) -> list[tuple[str, WorkerAddress]]:
        """The copies of ``location`` whose worker re-registered since ``tried`` was read."""
        sh = self.shuffle
        try:
            reply = sh.client._master.call(GetLocations(sh.app_id, sh.shuffle_id, self.partition))
        except CroupierError as exc:
            log.warning("cannot refresh the locations of partition %d: %s", self.partition, exc)
            return []
        before = {address.worker_id: address for _, address in tried}
        moved = []
        for entry in reply["locations"]:
            fresh = location_from_reply(entry)
            if fresh.epoch != location.epoch:
                continue
            for role, address in ((PRIMARY, fresh.primary), (REPLICA, fresh.replica)):
                old = before.get(address.worker_id) if address is not None else None
                if address is not None and old is not None and address.incarnation != old.incarnation:
                    moved.append((role, address))
        return moved

    def _read_copy(
        self, location: Location, role: str, address: WorkerAddress, selector: BatchSelector
    ) -> Iterator[bytes]:
        if not address.known:
            raise _CopyFailed("the worker is no longer registered")
        sh = self.shuffle
        url = address.fetch_url
        base = (sh.app_id, sh.shuffle_id, self.partition, location.epoch, role, address.incarnation)
        timeout = self._lost_timeout if address.status == "lost" else self._fetch_timeout
        # Chunk 0 is asked for together with OPEN_STREAM rather than after it: one round
        # trip less per location, which is most of a small partition's cost. Its reply is
        # dropped when the location turns out empty or cannot be opened.
        results: _Results = queue.SimpleQueue()
        self._send(url, to_json(FetchChunk(*base, chunk=0)), 0, results)
        try:
            opened = self._request(url, MsgType.OPEN_STREAM, to_json(OpenStream(*base)), timeout)
        except UnknownShuffle:
            return  # nothing was ever pushed to this location
        except NotCommitted as exc:
            raise _CopyNotCommitted(f"{exc.code}: {exc.message}") from exc
        except CroupierError as exc:
            raise _CopyFailed(f"{exc.code}: {exc.message}") from exc
        chunks = opened.body.get("chunks", [])
        for chunk in self._fetch(url, base, len(chunks), results, sent=1):
            self.stats["chunks"] += 1
            try:
                batches = parse_chunk(chunk)
                for header, data in batches:
                    if selector.is_new(header):
                        records = split_records(data)
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
        self, url: str, base: tuple[str, int, int, int, str, str], count: int, results: _Results, *, sent: int
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
                    raise _CopyFailed(f"no reply to FETCH_CHUNK {index} from {url}") from None
                ready[i] = (reply, error)
            reply, error = ready.pop(index)
            if error is not None:
                raise _CopyFailed(f"chunk {index}: {error.code}: {error.message}")
            if reply is None or not reply.payloads:
                raise _CopyFailed(f"chunk {index}: the reply carries no data")
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

    def _request(self, url: str, msg_type: int, body: dict[str, Any], timeout: float) -> Reply:
        box: queue.SimpleQueue[tuple[Reply | None, CroupierError | None]] = queue.SimpleQueue()
        self.shuffle.client._send(url, msg_type, body, [], lambda r, e: box.put((r, e)), timeout=timeout)
        try:
            reply, error = box.get(timeout=self._wait_reply)
        except queue.Empty:
            raise RequestTimeout(f"no reply from {url}") from None
        if error is not None:
            raise error
        assert reply is not None
        return reply
