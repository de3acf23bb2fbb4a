"""``Writer``: one map attempt's records, pushed to the partitions' workers.

State:
    an ``Accumulator`` (records -> batches) and a ``Sender`` (batches -> pushes),
    both driven by the thread that calls ``write`` and ``close``; ``won`` and
    ``winner`` once ``close`` has called ``MapperEnd``.

Closing flushes every buffer, seals every touched partition, waits for every
ack, then calls ``MapperEnd``; the first attempt of a map to get there wins.
A slower attempt whose pushes are refused because the shuffle is already
committed (another attempt won) is *superseded*: ``close`` returns False.
Leaving the ``with`` block with an exception aborts instead: buffers are
dropped and ``MapperEnd`` is not called, so the attempt never counts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING, Self

from croupier._accumulator import Accumulator, OutBatch
from croupier._routing import PartitionLocation
from croupier._sender import Sender
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.commands import MapperEnd, RevivePartition
from croupier.core.errors import Conflict, NotEnoughWorkers
from croupier.core.replies import LocationsReply, MapperEndReply

if TYPE_CHECKING:
    from croupier._client import Shuffle

__all__ = ["Writer"]

log = logging.getLogger(__name__)

_OPEN, _CLOSED, _ABORTED, _SUPERSEDED = "open", "closed", "aborted", "superseded"


class Writer:
    """Writes the records of one map attempt. Not thread-safe: use it from one thread.

    Usage::

        with shuffle.writer(map_id=0, attempt_id=0) as w:
            w.write(3, b"one record")
        print(w.won)

    Parameters:
        shuffle: the shuffle written to.
        map_id: ``0..num_mappers-1``.
        attempt_id: any non-negative int; the first attempt of a map to close wins.

    Raises:
        ValueError: ``map_id`` or ``attempt_id`` out of range.
    """

    def __init__(self, shuffle: Shuffle, map_id: int, attempt_id: int = 0) -> None:
        if not 0 <= map_id < shuffle.num_mappers:
            raise ValueError(f"map_id {map_id} is out of range 0..{shuffle.num_mappers - 1}")
        if not 0 <= attempt_id < 2**31:
            raise ValueError(f"attempt_id {attempt_id} is out of range 0..2**31-1")
        self.shuffle = shuffle
        self.map_id = map_id
        self.attempt_id = attempt_id
        config = shuffle.client.config
        self._config = config
        self._accumulator = Accumulator(
            map_id,
            attempt_id,
            shuffle.num_partitions,
            buffer_size=config.push_buffer_size,
            memory_limit=config.writer_memory_limit,
            key=shuffle.app_key,
        )
        self._sender = Sender(
            app_id=shuffle.app_id,
            shuffle_id=shuffle.shuffle_id,
            routing=shuffle.routing,
            send=shuffle.client._send,
            revive=self._revive,
            window=config.max_in_flight_per_worker,
            merge_size=config.push_merge_size,
            max_revives=config.max_revives_per_partition,
            stall_timeout=config.rpc_timeout * 2 + 10,
            congestion_timeout=max(60.0, config.rpc_timeout * 10),
        )
        self._state = _OPEN
        self.won: bool | None = None
        self.winner: int | None = None

    # -- the contract -------------------------------------------------------------------------
    def write(self, partition: int, record: bytes | bytearray | memoryview) -> None:
        """Add one record to ``partition``. Blocks while the target worker's window is full.

        Raises:
            ValueError: the partition is out of range, or the writer is closed.
            TypeError: ``record`` is not bytes-like.
            CroupierError: a push failed for good (the writer is then aborted).
        """
        if self._state != _OPEN:
            if self._state == _SUPERSEDED:
                return  # another attempt won and the shuffle is committed: nothing to keep
            raise ValueError(f"writer of map {self.map_id} attempt {self.attempt_id} is {self._state}")
        batches = self._accumulator.add(partition, record)
        if batches:  # most records only go into a buffer
            self._submit(batches)

    def _write_framed(self, partition: int, framed: memoryview) -> None:
        """``write`` for a record that comes with its u32 little-endian length in front (for
        integrations that serialise into such a buffer): it becomes a batch without a copy, and
        must not change until the writer is closed. Same errors as ``write``."""
        if self._state != _OPEN:
            if self._state == _SUPERSEDED:
                return
            raise ValueError(f"writer of map {self.map_id} attempt {self.attempt_id} is {self._state}")
        self._submit(self._accumulator.add_framed(partition, framed))

    def _submit(self, batches: list[OutBatch]) -> None:
        try:
            self._sender.submit(batches)
        except Conflict:
            if not self._superseded():
                self.abort()
                raise
        except BaseException:
            self.abort()
            raise

    def close(self) -> bool:
        """Flush, seal every touched partition, wait for every ack, then ``MapperEnd``.

        Returns whether this attempt won. Idempotent once closed.

        Raises:
            CroupierError: a push or the master call failed (the writer is then aborted).
            ValueError: the writer was aborted.
        """
        if self._state in (_CLOSED, _SUPERSEDED):
            return bool(self.won)
        if self._state == _ABORTED:
            raise ValueError(f"writer of map {self.map_id} attempt {self.attempt_id} was aborted")
        try:
            self._sender.submit(self._accumulator.flush())
            self._sender.submit(self._accumulator.seals())
            self._sender.drain()
            reply = self._mapper_end()
        except Conflict:
            if self._superseded():
                return False
            self.abort()
            raise
        except BaseException:
            self.abort()
            raise
        self._state = _CLOSED
        self.won = reply.won
        self.winner = reply.winner
        log.debug(
            "map %d attempt %d of %s/%d ended: %d records, %d messages, won=%s",
            self.map_id,
            self.attempt_id,
            self.shuffle.app_id,
            self.shuffle.shuffle_id,
            self._accumulator.records,
            self._sender.messages,
            self.won,
        )
        return self.won

    def abort(self) -> None:
        """Drop buffers and stop; ``MapperEnd`` is never called. Idempotent."""
        if self._state == _OPEN:
            self._state = _ABORTED
            self._accumulator.drop()
            self._sender.abort()

    @property
    def closed(self) -> bool:
        return self._state != _OPEN

    @property
    def stats(self) -> dict[str, int]:
        """Counters: records, bytes written, pushes sent, congestion retries, revives (after
        failures and hard splits), soft splits asked for."""
        return {
            "records": self._accumulator.records,
            "bytes": self._accumulator.bytes_in,
            "partitions": len(self._accumulator.touched),
            "messages": self._sender.messages,
            "bytes_sent": self._sender.bytes_sent,
            "congested": self._sender.congested,
            "revived": self._sender.revived,
            "soft_splits": self._sender.soft_splits,
        }

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __repr__(self) -> str:
        return (
            f"Writer({self.shuffle.app_id}/{self.shuffle.shuffle_id} map={self.map_id} "
            f"attempt={self.attempt_id} {self._state})"
        )

    # -- the master ---------------------------------------------------------------------------
    def _mapper_end(self) -> MapperEndReply:
        # declare the partitions sealed, so the commit and readers know whose seal to expect where
        touched = self._accumulator.touched
        sh = self.shuffle
        bitmap = encode_bitmap(from_partitions(touched, sh.num_partitions))
        return sh.master.request(
            MapperEnd(sh.app_id, sh.shuffle_id, self.map_id, self.attempt_id, len(touched), bitmap),
            MapperEndReply,
        )

    def _superseded(self) -> bool:
        """After a ``Conflict`` (a revive refused): did another attempt win a finished shuffle?

        Only when every map has ended is ``MapperEnd`` safe for an attempt whose pushes
        failed: it then cannot win, and the reply names the winner. The writer then
        drops everything; later writes are ignored and ``close`` returns False.
        """
        sh = self.shuffle
        summary = sh._summary()
        if not summary.committed and summary.mappers_ended < summary.num_mappers:
            return False
        reply = self._mapper_end()
        if reply.won:
            return False  # this very attempt had already ended: the conflict is real
        self._accumulator.drop()
        self._sender.abort()
        self._state = _SUPERSEDED
        self.won = False
        self.winner = reply.winner
        log.info(
            "map %d attempt %d of %s/%d: attempt %d won and the shuffle is done; dropping this one",
            self.map_id,
            self.attempt_id,
            sh.app_id,
            sh.shuffle_id,
            self.winner,
        )
        return True

    def _revive(self, partition: int, epoch: int, reason: str, failed: tuple[str, ...]) -> PartitionLocation:
        command = RevivePartition(
            self.shuffle.app_id, self.shuffle.shuffle_id, partition, epoch, reason, failed
        )
        deadline = time.monotonic() + self._config.rpc_timeout
        pause = 0.05
        while True:
            try:
                reply = self.shuffle.master.request(command, LocationsReply)
            except NotEnoughWorkers:
                if command.failed_workers:
                    # Blame is a guess (a timeout blames the primary, which may be fine and
                    # only waiting on its replica); the master skips lost workers anyway.
                    command = dataclasses.replace(command, failed_workers=())
                    continue
                if time.monotonic() > deadline:
                    raise
                time.sleep(pause)
                pause = min(1.0, pause * 2)
                continue
            return reply.locations[-1]
