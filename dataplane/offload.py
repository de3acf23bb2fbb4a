"""``Offloader``: a worker's committed partition copies, uploaded to the object store (issue 26).

After COMMIT_FILES has answered, every copy this worker committed for the shuffle is queued
here; a few threads upload each as two final objects (``transports/objstore.py``): the data,
streamed chunk by chunk from the partition store as one multipart upload (no temporary key, no
rename), then its index (the chunk index, the data's size and BLAKE3). An index object is
written only after its data object is whole, so a reader that finds the index finds every byte.

Memory stays bounded: the queue holds keys only, and each of the ``threads`` uploads holds at
most MULTIPART_PART * MULTIPART_CONCURRENCY bytes in flight. A failed upload is retried a few
times, then logged and counted (the worker copies still serve; ``wait_offloaded`` keeps
waiting for it).

A copy that overflowed to the object store before its commit (``dataplane/overflow.py``) is
already there: ``already`` gives its size and digest, and it is only reported.

State: the queue of ``(LocationKey, queued at)``, the upload threads, counters for the metrics
and the admin view (``stats()``), and the callback told of each copy uploaded.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import blake3

from croupier.core.errors import CroupierError, UnknownShuffle
from croupier.storage.store import LocationKey, PartitionStore
from croupier.transports.objstore import (
    MULTIPART_PART,
    ObjectStore,
    ObjectStoreError,
    app_prefix,
    object_key,
)

__all__ = ["OffloadedCopy", "Offloader"]

log = logging.getLogger(__name__)

ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class OffloadedCopy:
    """One copy in the object store: its two keys, the data's size and BLAKE3 (hex)."""

    key: LocationKey
    data_key: str
    index_key: str
    size: int
    digest: str


class Offloader:
    """Uploads committed copies in the background; ``close()`` stops the threads."""

    def __init__(
        self,
        objects: ObjectStore,
        store: PartitionStore,
        *,
        threads: int = 2,
        on_offloaded: Callable[[OffloadedCopy], None] | None = None,
        on_close: Callable[[], None] | None = None,
        already: Callable[[LocationKey], tuple[int, str] | None] | None = None,
    ) -> None:
        self._on_close = on_close
        self._already = already
        self.objects = objects
        self._store = store
        self._on_offloaded = on_offloaded
        self._queue: queue.Queue[tuple[LocationKey, float] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pending: dict[LocationKey, float] = {}
        self._done: set[LocationKey] = set()
        self.uploaded = 0
        self.uploaded_bytes = 0
        self.failed = 0
        self._threads = [
            threading.Thread(target=self._run, name=f"offload-{i}", daemon=True) for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def submit(self, keys: Iterable[LocationKey]) -> None:
        """Queue these committed copies (one already uploaded or queued is skipped)."""
        now = time.monotonic()
        for key in keys:
            with self._lock:
                if key in self._done or key in self._pending:
                    continue
                self._pending[key] = now
            self._queue.put((key, now))

    def stats(self) -> dict[str, float]:
        """Progress and lag: copies uploaded, bytes, failures, queued, the oldest queued's age (s)."""
        with self._lock:
            oldest = min(self._pending.values(), default=None)
            pending = len(self._pending)
        return {
            "uploaded": self.uploaded,
            "uploaded_bytes": self.uploaded_bytes,
            "failed": self.failed,
            "pending": pending,
            "lag_seconds": 0.0 if oldest is None else time.monotonic() - oldest,
        }

    def delete(self, app_id: str, shuffle_id: int | None) -> int:
        """DESTROY: delete the objects of a shuffle (None: of the whole app); how many.

        Every worker of the shuffle deletes the same prefix: deleting is idempotent. A failure
        is logged; the master's orphan sweep removes what is left (issue 26)."""
        with self._lock:
            self._done = {
                k for k in self._done if not (k.app_id == app_id and shuffle_id in (None, k.shuffle_id))
            }
        prefix = app_prefix(app_id) + ("" if shuffle_id is None else f"{shuffle_id}/")
        try:
            keys = [o.key for o in self.objects.list(prefix)]
            self.objects.delete(keys)
        except ObjectStoreError as exc:
            log.warning("deleting the objects under %s failed: %s", prefix, exc)
            return 0
        return len(keys)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(30)
        self.objects.close()
        if self._on_close is not None:
            self._on_close()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            key, _ = item
            copy, gone = None, False
            for attempt in range(ATTEMPTS):
                try:
                    copy = self.upload(key)
                    break
                except CroupierError as exc:  # the copy is gone (DESTROY): nothing to upload
                    log.info("not offloaded: %s: %s", key.name, exc)
                    gone = True
                    break
                except ObjectStoreError as exc:
                    log.warning("offload of %s failed (attempt %d): %s", key.name, attempt + 1, exc)
                    time.sleep(0.2 * (attempt + 1))
            with self._lock:
                self._pending.pop(key, None)
                if copy is None:
                    self.failed += 0 if gone else 1
                    continue
                self._done.add(key)
                self.uploaded += 1
                self.uploaded_bytes += copy.size
            if self._on_offloaded is not None:
                try:
                    self._on_offloaded(copy)
                except Exception:  # a report that fails must not stop the uploads
                    log.exception("reporting the offload of %s failed", key.name)

    def upload(self, key: LocationKey) -> OffloadedCopy:
        """Upload one committed copy: its data object, then its index object."""
        committed = self._store.committed(key)
        if committed is None:  # destroyed meanwhile: nothing to upload
            raise UnknownShuffle(f"{key.name} is no longer here")
        index = committed.index
        parts = (key.app_id, key.shuffle_id, key.partition, key.epoch, str(key.role))
        data_key, index_key = object_key(*parts, "data"), object_key(*parts, "index")
        done = self._already(key) if self._already is not None else None
        if done is not None:  # overflowed (dataplane/overflow.py): its commit wrote both objects
            return OffloadedCopy(key, data_key, index_key, *done)
        hasher = blake3.blake3()

        def chunks() -> Iterator[bytes]:
            for offset, length in index.chunks:
                data = self._store.read(key, offset, length)
                hasher.update(data)
                yield data

        if index.size <= MULTIPART_PART:  # one PUT: a multipart upload costs three requests
            whole = b"".join(chunks())
            self.objects.put(data_key, whole)
            size = len(whole)
        else:
            size = self.objects.put_parts(data_key, chunks())
        if size != index.size:
            raise ObjectStoreError(f"{key.name}: uploaded {size} bytes of {index.size}")
        digest = hasher.hexdigest()
        body = {"index": index.to_json(), "size": size, "blake3": digest}
        self.objects.put(index_key, json.dumps(body, sort_keys=True).encode())
        if self._store.committed(key) is None:
            # DESTROY removed the files during the upload: its deletion of the objects may have
            # run before these were written, so they go now (DESTROY removes the files first)
            self.objects.delete([index_key, data_key])
            raise UnknownShuffle(f"{key.name} was destroyed during its upload")
        return OffloadedCopy(key, data_key, index_key, size, digest)
