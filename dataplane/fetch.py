"""``FetchHandler``: OPEN_STREAM and FETCH_CHUNK on the fetch port (DESIGN §8).

OPEN_STREAM answers a committed copy's chunk table from its index, on the fetch server
thread. FETCH_CHUNK reads the chunk on a small thread pool (owned here, shut down by
``close``) so that a slow disk never holds up the server thread; the reader answers.

State: the read pool. The store and the live locations are shared with the rest of the
worker.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from croupier.core.codec import from_json
from croupier.core.dataplane import FetchChunk, FetchChunkReply, OpenStream, OpenStreamReply, encode_reply
from croupier.core.errors import BadRequest, CroupierError, NotCommitted, Unavailable, UnknownShuffle
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.storage.store import CommittedFile, LocationKey, PartitionStore
from croupier.transports.rpc import Request, Responder

__all__ = ["FetchHandler"]

log = logging.getLogger(__name__)


class FetchHandler:
    """Parameters:
    identity: this worker; requests for another incarnation are refused.
    locations: the live locations (to tell "not committed yet" from "never pushed to").
    store: the committed files.
    readers: threads reading chunks.
    """

    def __init__(
        self, identity: Identity, locations: Locations, store: PartitionStore, *, readers: int = 4
    ) -> None:
        self._identity = identity
        self._locations = locations
        self._store = store
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix="fetch-read")

    def close(self) -> None:
        """Finish the reads started, drop the queued ones (their requests get no answer)."""
        self._reads.shutdown(wait=True, cancel_futures=True)

    def on_fetch(self, request: Request, responder: Responder) -> None:
        """Answer an OPEN_STREAM now, or start reading a FETCH_CHUNK's chunk."""
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
        self._reads.submit(self._read, cf.key, offset, length, responder)

    def _read(self, key: LocationKey, offset: int, length: int, responder: Responder) -> None:
        try:
            data = self._store.read(key, offset, length)
            responder.ok(encode_reply(FetchChunkReply(offset, length)), [data])
        except CroupierError as exc:
            responder.error(exc)
        except Exception as exc:
            log.exception("read of %s failed", key)
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
