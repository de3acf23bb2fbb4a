"""``FetchHandler``: OPEN_STREAM, FETCH_CHUNK and FETCH_SMALL on the fetch port (DESIGN §8).

OPEN_STREAM answers a committed copy's chunk table from its index, on the fetch server
thread. FETCH_CHUNK reads the chunk on a small thread pool (owned here, shut down by
``close``) so that a slow disk never holds up the server thread; the reader answers.
A chunk of a location in the memory tier is answered from memory, on the server thread.
FETCH_SMALL answers many small committed copies of one shuffle at once (PROTOCOL §5.2):
from the tier on the server thread when it holds them all, else on the read pool.

State: the read pool. The store and the live locations are shared with the rest of the
worker.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from croupier.core.codec import from_json
from croupier.core.dataplane import (
    FETCH_SMALL_MAX_BYTES,
    FETCH_SMALL_MAX_LOCATION,
    FetchChunk,
    FetchChunkReply,
    FetchSmall,
    FetchSmallReply,
    OpenStream,
    OpenStreamReply,
    SmallLocation,
    encode_reply,
)
from croupier.core.errors import BadRequest, CroupierError, NotCommitted, Unavailable, UnknownShuffle
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.storage.memory_tier import MemoryTier
from croupier.storage.store import CommittedFile, LocationKey, PartitionStore
from croupier.transports.log_context import key_fields
from croupier.transports.rpc import Request, Responder

__all__ = ["FetchHandler"]

log = logging.getLogger(__name__)


class FetchHandler:
    """Parameters:
    identity: this worker; requests for another incarnation are refused.
    locations: the live locations (to tell "not committed yet" from "never pushed to").
    store: the committed files.
    readers: threads reading chunks.
    tier: the small committed copies kept in memory (none: every read goes to the store).
    """

    def __init__(
        self,
        identity: Identity,
        locations: Locations,
        store: PartitionStore,
        *,
        readers: int = 4,
        tier: MemoryTier | None = None,
    ) -> None:
        self._identity = identity
        self._locations = locations
        self._store = store
        self._tier = tier
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix="fetch-read")

    def close(self) -> None:
        """Finish the reads started, drop the queued ones (their requests get no answer)."""
        self._reads.shutdown(wait=True, cancel_futures=True)

    def on_fetch(self, request: Request, responder: Responder) -> None:
        """Answer an OPEN_STREAM now, or start reading a FETCH_CHUNK's chunk or a FETCH_SMALL."""
        if request.msg_type == MsgType.FETCH_SMALL:
            self._on_small(request, responder)
            return
        if request.msg_type == MsgType.OPEN_STREAM:
            stream = from_json(OpenStream, request.body)
            stream.validate()
            index = self._committed(stream).index
            responder.ok(encode_reply(OpenStreamReply(index.chunks, index.size, index.batches)))
            return
        fetch = from_json(FetchChunk, request.body)
        fetch.validate()
        cf = self._committed(fetch)
        if fetch.chunk >= len(cf.index.chunks):
            raise BadRequest(f"chunk {fetch.chunk} out of range: the location has {len(cf.index.chunks)}")
        offset, length = cf.index.chunks[fetch.chunk]
        kept = self._tier.read(cf.key, offset, length) if self._tier is not None else None
        if kept is not None:
            responder.ok(encode_reply(FetchChunkReply(offset, length)), [kept])
            return
        self._reads.submit(self._read, cf.key, offset, length, responder)

    def _on_small(self, request: Request, responder: Responder) -> None:
        small = from_json(FetchSmall, request.body)
        small.validate()
        self._identity.check(small.incarnation)
        plan: list[tuple[SmallLocation, CommittedFile | None]] = []
        budget = FETCH_SMALL_MAX_BYTES
        for partition, epoch, role in small.locations:
            body = OpenStream(small.app_id, small.shuffle_id, partition, epoch, role, small.incarnation)
            try:
                cf = self._committed(body)
            except (UnknownShuffle, NotCommitted) as exc:
                plan.append((SmallLocation(exc.code, message=exc.message), None))
                continue
            size = cf.index.size
            if size > FETCH_SMALL_MAX_LOCATION or size > budget:
                plan.append((SmallLocation("skipped"), None))
                continue
            budget -= size
            plan.append((SmallLocation("ok", size, cf.index.batches), cf))
        tier = self._tier
        if tier is not None and all(cf is None or cf.key in tier for _, cf in plan):
            self._answer_small(plan, responder)
        else:
            self._reads.submit(self._answer_small, plan, responder)

    def _answer_small(
        self, plan: list[tuple[SmallLocation, CommittedFile | None]], responder: Responder
    ) -> None:
        """Read every planned location (from the tier, else the store) and answer in one reply.

        A location whose read fails is answered as OPEN_STREAM would be (removed meanwhile)
        or ``skipped`` (any other failure: the reader tries it alone)."""
        entries: list[SmallLocation] = []
        payloads: list[bytes] = []
        for entry, cf in plan:
            if cf is None:
                entries.append(entry)
                continue
            try:
                data = self._tier.get(cf.key) if self._tier is not None else None
                if data is None:
                    data = self._store.read(cf.key, 0, cf.index.size)
            except (UnknownShuffle, NotCommitted) as exc:
                entries.append(SmallLocation(exc.code, message=exc.message))
                continue
            except Exception:
                log.exception("FETCH_SMALL read of %s failed", cf.key, extra=key_fields(cf.key))
                entries.append(SmallLocation("skipped"))
                continue
            entries.append(entry)
            payloads.append(data)
        responder.ok(encode_reply(FetchSmallReply(tuple(entries))), payloads)

    def _read(self, key: LocationKey, offset: int, length: int, responder: Responder) -> None:
        try:
            # a view of a pooled buffer, sent zero-copy; this thread keeps no reference to it
            responder.ok(
                encode_reply(FetchChunkReply(offset, length)), [self._store.read_view(key, offset, length)]
            )
        except CroupierError as exc:
            responder.error(exc)
        except Exception as exc:
            log.exception("read of %s failed", key, extra=key_fields(key))
            responder.error(Unavailable(f"read failed: {exc}"))

    def _committed(self, body: OpenStream | FetchChunk) -> CommittedFile:
        self._identity.check(body.incarnation)
        key = LocationKey(body.app_id, body.shuffle_id, body.partition, body.epoch, body.role)
        committed = self._store.committed(key)
        if committed is None:
            where = f"{body.app_id}/{body.shuffle_id}/{key.name}"
            if self._locations.get(key) is not None:
                raise NotCommitted(f"location {where} is not committed yet")
            raise UnknownShuffle(f"worker {self._identity.worker_id} holds no data for {where}")
        return committed
