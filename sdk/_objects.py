"""Reading partition copies from the object store (issue 26), and ``Shuffle.wait_offloaded``.

A worker uploads each committed copy as two objects (``dataplane/offload.py``): the data
(the batches, exactly as in its file) and, once the data is whole, its index (the chunk index,
the data's size and BLAKE3). A reader that no worker copy could serve reads the index object,
then each chunk with one ranged GET: the chunks are parsed, digests checked and batches chosen
by the same code as a worker's chunks (``_reader.Reader._chunk_records``), so the completeness
proof applies to object copies exactly as to worker copies.

The store is the client's ``object_store`` URL (default: ``$CROUPIER_OBJECT_STORE``), with the
same AWS variables as the workers'.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from croupier.core.codec import to_json
from croupier.core.commands import MAX_PARTITIONS_PER_CALL, GetLocationsBatch
from croupier.core.dataplane import OpenStream
from croupier.core.enums import CopyRole
from croupier.core.errors import CroupierError, RequestTimeout, UnknownShuffle
from croupier.core.replies import LocationsBatchReply, WorkerAddress
from croupier.core.wire import MsgType
from croupier.transports.objstore import (
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    object_key,
)

if TYPE_CHECKING:
    from croupier._client import Shuffle

Epoch = tuple[int, int]  # (partition, epoch)

__all__ = ["ObjectCopyAbsent", "ObjectCopyFailed", "object_chunks", "wait_offloaded"]


class ObjectCopyFailed(Exception):
    """The object copy cannot be read (its index is malformed, a range failed)."""


class ObjectCopyAbsent(ObjectCopyFailed):
    """No object copy of this location (not offloaded, or deleted)."""


def _index(store: ObjectStore, key: str) -> dict[str, Any]:
    size = store.size(key)
    if size is None:
        raise ObjectCopyAbsent(f"no object {key}")
    try:
        body: Any = json.loads(store.get_range(key, 0, size)) if size else {}
        index = body["index"]
        chunks = [(int(o), int(n)) for o, n in index["chunks"]]
        return {"chunks": chunks, "size": int(body["size"])}
    except ObjectNotFound as exc:
        raise ObjectCopyAbsent(str(exc)) from exc
    except (ObjectStoreError, ValueError, KeyError, TypeError) as exc:
        raise ObjectCopyFailed(f"index object {key} is unreadable: {exc}") from exc


def object_chunks(
    store: ObjectStore, app_id: str, shuffle_id: int, partition: int, epoch: int, role: str
) -> Iterator[memoryview]:
    """The chunks of one object copy, in order (a ranged GET each).

    Raises:
        ObjectCopyAbsent: no index object: the copy was not offloaded.
        ObjectCopyFailed: a malformed index, or a data object shorter than its index says.
    """
    where = (app_id, shuffle_id, partition, epoch, role)
    index = _index(store, object_key(*where, "index"))
    data_key = object_key(*where, "data")
    size = store.size(data_key)
    if size != index["size"]:
        raise ObjectCopyFailed(f"object {data_key}: {size} bytes, its index says {index['size']}")
    for offset, length in index["chunks"]:
        try:
            yield memoryview(store.get_range(data_key, offset, length))
        except ObjectStoreError as exc:
            raise ObjectCopyFailed(str(exc)) from exc


def _offloaded(
    store: ObjectStore, shuffle: Shuffle, reply: LocationsBatchReply, empty: set[Epoch]
) -> Epoch | None:
    """The first epoch in ``reply`` with no object copy yet (one role of the copies the commit
    did not fail), None when every one has one. A partition no winning map declared holds
    nothing: no worker committed a copy of it, so none is waited for; nor is an epoch whose
    workers say they never received data for it (``empty``, filled here: a split's new epoch
    placed after the writer's last push)."""
    app_id, shuffle_id = shuffle.app_id, shuffle.shuffle_id
    for entry in reply.partitions:
        if entry.maps == ():
            continue
        failed = set(entry.failed_copies)
        for loc in entry.locations:
            if (entry.partition, loc.epoch) in empty:
                continue
            copies = [(r, a) for r, a in loc.copies() if (loc.epoch, a.worker_id) not in failed]
            keys = [object_key(app_id, shuffle_id, entry.partition, loc.epoch, r, "index") for r, _ in copies]
            if not keys or any(store.size(k) is not None for k in keys):
                continue
            if not _never_pushed(shuffle, entry.partition, loc.epoch, copies):
                return entry.partition, loc.epoch
            empty.add((entry.partition, loc.epoch))
    return None


def _never_pushed(
    shuffle: Shuffle, partition: int, epoch: int, copies: list[tuple[CopyRole, WorkerAddress]]
) -> bool:
    """Whether every one of ``copies`` answers OPEN_STREAM with ``UNKNOWN_SHUFFLE``: its worker
    never received data for it, so there is nothing to offload (PROTOCOL §5.3). False when a
    worker cannot be asked or answers anything else."""
    for role, address in copies:
        if not address.known or not address.incarnation:
            return False
        body = OpenStream(shuffle.app_id, shuffle.shuffle_id, partition, epoch, role, address.incarnation)
        if not isinstance(_open_stream(shuffle, address.fetch_url, body), UnknownShuffle):
            return False
    return True


def _open_stream(shuffle: Shuffle, url: str, body: OpenStream) -> CroupierError | None:
    """The error OPEN_STREAM gets from ``url`` (None: it opened; RequestTimeout: no reply)."""
    box: queue.SimpleQueue[CroupierError | None] = queue.SimpleQueue()
    shuffle.client._send(url, MsgType.OPEN_STREAM, to_json(body), [], lambda _, e: box.put(e), timeout=5.0)
    try:
        return box.get(timeout=10.0)
    except queue.Empty:
        return RequestTimeout(f"no reply from {url}")


def wait_offloaded(shuffle: Shuffle, timeout: float) -> None:
    """Return once every committed partition of ``shuffle`` has its object copy.

    Raises:
        ValueError: the client has no object store.
        RequestTimeout: not all offloaded within ``timeout`` seconds; its message names
            what is still pending (the shuffle not committed, the first partition and epoch
            with no object copy, or the store's error).
    """
    store = shuffle.client._object_store()
    if store is None:
        raise ValueError(
            "this client has no object store (connect(..., object_store=) or $CROUPIER_OBJECT_STORE)"
        )
    _wait(store, shuffle, timeout)


def _wait(store: ObjectStore, shuffle: Shuffle, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    step = MAX_PARTITIONS_PER_CALL
    empty: set[Epoch] = set()  # (partition, epoch) never pushed to: nothing to wait for
    while True:
        pending = ""  # what is still missing, for the timeout's message
        for first in range(0, shuffle.num_partitions, step):
            partitions = tuple(range(first, min(first + step, shuffle.num_partitions)))
            command = GetLocationsBatch(shuffle.app_id, shuffle.shuffle_id, partitions)
            reply = shuffle.master.request(command, LocationsBatchReply)
            if not reply.committed:
                pending = "it is not committed yet"
                break
            try:
                missing = _offloaded(store, shuffle, reply, empty)
            except ObjectStoreError as exc:  # an outage of the store: wait for it too
                pending = f"the object store fails: {exc}"
                break
            if missing is not None:
                pending = (
                    f"partition {missing[0]} epoch {missing[1]} (the first found) has no object copy"
                    f" yet in {store.url}: is the store reachable from the workers? their"
                    " croupier_worker_offload_retrying gauge and logs say"
                )
                break
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RequestTimeout(
                f"shuffle {shuffle.app_id}/{shuffle.shuffle_id} not offloaded within {timeout:g} s: {pending}"
            )
        time.sleep(0.2)
