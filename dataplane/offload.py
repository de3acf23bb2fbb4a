"""``Offloader``: a worker's committed partition copies, uploaded to the object store (issue 26).

After COMMIT_FILES has answered, every copy this worker committed for the shuffle is queued
here; a few threads upload each as two final objects (``transports/objstore.py``): the data,
streamed chunk by chunk from the partition store as one multipart upload (no temporary key, no
rename), then its index (the chunk index, the data's size and BLAKE3). An index object is
written only after its data object is whole, so a reader that finds the index finds every byte.

Memory stays bounded: the queue holds keys only, and each of the ``threads`` uploads holds at
most MULTIPART_PART * MULTIPART_CONCURRENCY bytes in flight.

A failed upload, or a failed report of one to the master, is tried again later, with capped
exponential backoff (``core/retry_backoff.py``: 1 s doubling to 30 s), for as long as the copy
is on this worker: until it is uploaded and reported, the copy is gone (DESTROY, an expiry),
its shuffle's objects are deleted, or the offloader closes. An outage of the store (or of the
master) of any length therefore delays the offload, never loses it. A copy waiting for its retry
is a key and two numbers (no data is held); a delayed-retry thread puts it back in the queue
when it is due. The first failure of a copy is logged at WARNING with the error, then only its
2nd, 4th, 8th, ... (the others at DEBUG); every failed attempt is counted (``stats()``).

Copies found committed on disk when a worker starts are submitted too (``submit(found=True)``):
one whose index object is already in the store is only reported again (a report is idempotent),
the others are uploaded, so a restart between a commit and its offload loses nothing.

A copy that overflowed to the object store before its commit (``dataplane/overflow.py``) is
already there: ``already`` gives its size and digest, and it is only reported.

State: the queue of ``(LocationKey, queued at)``, the upload threads, the copies waiting for a
retry (their failures in a row, and the uploaded copy when only its report is retried) with a
heap of when each is due, counters for the metrics and the admin view (``stats()``), and the
callback told of each copy uploaded.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import blake3

from croupier.core.errors import CroupierError, UnknownShuffle
from croupier.core.retry_backoff import RetryBackoff
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

BACKOFF = RetryBackoff(first=1.0, cap=30.0)


@dataclass(frozen=True, slots=True)
class OffloadedCopy:
    """One copy in the object store: its two keys, the data's size and BLAKE3 (hex)."""

    key: LocationKey
    data_key: str
    index_key: str
    size: int
    digest: str


@dataclass(slots=True)
class _Retry:
    """A copy waiting for its next attempt: its failures in a row; its copy once uploaded (then
    only the report to the master is retried)."""

    failures: int = 0
    copy: OffloadedCopy | None = None


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
        backoff: RetryBackoff = BACKOFF,
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
        self._found: set[LocationKey] = set()  # found on disk at start: maybe already offloaded
        self._backoff = backoff
        self._retrying: dict[LocationKey, _Retry] = {}
        self._delayed: list[tuple[float, int, LocationKey]] = []  # (due, tie, key), a heap
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self.uploaded = 0
        self.uploaded_bytes = 0
        self.failed = 0  # failed upload attempts
        self.report_failed = 0  # failed reports to the master
        self._threads = [
            threading.Thread(target=self._run, name=f"offload-{i}", daemon=True) for i in range(threads)
        ]
        self._threads.append(threading.Thread(target=self._retry_due, name="offload-retry", daemon=True))
        for t in self._threads:
            t.start()

    def submit(self, keys: Iterable[LocationKey], *, found: bool = False) -> None:
        """Queue these committed copies (one already uploaded or queued is skipped). ``found``:
        copies found on disk at start, whose objects may already be in the store."""
        now = time.monotonic()
        for key in keys:
            with self._lock:
                if key in self._done or key in self._pending:
                    continue
                self._pending[key] = now
                if found:
                    self._found.add(key)
            self._queue.put((key, now))

    def stats(self) -> dict[str, float]:
        """Progress and lag: copies uploaded, bytes, failures, queued, the oldest queued's age (s)."""
        with self._lock:
            oldest = min(self._pending.values(), default=None)
            pending = len(self._pending)
            retrying = len(self._retrying)
        return {
            "uploaded": self.uploaded,
            "uploaded_bytes": self.uploaded_bytes,
            "failed": self.failed,
            "report_failed": self.report_failed,
            "pending": pending,
            "retrying": retrying,
            "lag_seconds": 0.0 if oldest is None else time.monotonic() - oldest,
        }

    def delete(self, app_id: str, shuffle_id: int | None) -> int:
        """DESTROY: delete the objects of a shuffle (None: of the whole app); how many.

        Every worker of the shuffle deletes the same prefix: deleting is idempotent. A failure
        is logged; the master's orphan sweep removes what is left (issue 26)."""

        def of(k: LocationKey) -> bool:
            return k.app_id == app_id and shuffle_id in (None, k.shuffle_id)

        with self._lock:
            self._done = {k for k in self._done if not of(k)}
            for k in [k for k in self._retrying if of(k)]:  # no retry of a destroyed copy
                del self._retrying[k]
                self._pending.pop(k, None)
        prefix = app_prefix(app_id) + ("" if shuffle_id is None else f"{shuffle_id}/")
        try:
            keys = [o.key for o in self.objects.list(prefix)]
            self.objects.delete(keys)
        except ObjectStoreError as exc:
            log.warning("deleting the objects under %s failed: %s", prefix, exc)
            return 0
        return len(keys)

    def close(self) -> None:
        with self._lock:
            self._closed = True  # no more retries
            self._wake.notify_all()
        for _ in range(len(self._threads) - 1):
            self._queue.put(None)
        for t in self._threads:
            t.join(30)
        self.objects.close()
        if self._on_close is not None:
            self._on_close()

    def _retry_due(self) -> None:
        """Put each copy whose retry is due back in the queue."""
        with self._lock:
            while not self._closed:
                if not self._delayed:
                    self._wake.wait()
                    continue
                due, _, key = self._delayed[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._delayed)
                if key in self._retrying:  # else: destroyed meanwhile
                    self._queue.put((key, due))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._attempt(item[0])

    def _attempt(self, key: LocationKey) -> None:
        """Upload one copy (unless only its report failed before), then report it."""
        with self._lock:
            if self._closed:
                return
            retry = self._retrying.get(key)
        copy = retry.copy if retry is not None else None
        if copy is None:
            try:
                copy = self.upload(key)
            except CroupierError as exc:  # the copy is gone (DESTROY): nothing to upload
                log.info("not offloaded: %s: %s", key.name, exc)
                self._forget(key)
                return
            except ObjectStoreError as exc:
                self._failed(key, None, exc)
                return
            with self._lock:
                self._done.add(key)
                self.uploaded += 1
                self.uploaded_bytes += copy.size
        elif self._store.committed(key) is None:  # gone while its report waited
            self._forget(key)
            return
        if self._on_offloaded is not None:
            try:
                self._on_offloaded(copy)
            except CroupierError as exc:
                if exc.retriable:  # no master reachable, a leader change: later
                    self._failed(key, copy, exc)
                    return
                log.warning("the master refused the offload of %s: %s", key.name, exc)
            except Exception as exc:  # a report that fails must not stop the uploads
                self._failed(key, copy, exc)
                return
        self._forget(key)

    def _forget(self, key: LocationKey) -> None:
        with self._lock:
            self._pending.pop(key, None)
            self._retrying.pop(key, None)
            self._found.discard(key)

    def _failed(self, key: LocationKey, copy: OffloadedCopy | None, exc: Exception) -> None:
        """Count the failure and try again after the backoff (logged ever more rarely)."""
        with self._lock:
            if copy is None:
                self.failed += 1
            else:
                self.report_failed += 1
            if self._closed or key not in self._pending:  # closing, or destroyed meanwhile
                self._retrying.pop(key, None)
                return
            retry = self._retrying.setdefault(key, _Retry())
            retry.failures += 1
            retry.copy = copy
            failures = retry.failures
            delay = self._backoff.delay(failures)
            heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), key))
            self._wake.notify()
        what = "offload" if copy is None else "report of the offload"
        log.log(
            logging.WARNING if self._backoff.loud(failures) else logging.DEBUG,
            "%s of %s failed (%d in a row; next try in %g s, until the copy is gone): %s",
            what,
            key.name,
            failures,
            delay,
            exc,
        )

    def upload(self, key: LocationKey) -> OffloadedCopy:
        """Upload one committed copy: its data object, then its index object."""
        committed = self._store.committed(key)
        if committed is None:  # destroyed meanwhile: nothing to upload
            raise UnknownShuffle(f"{key.name} is no longer here")
        index = committed.index
        parts = (key.app_id, key.shuffle_id, key.partition, key.epoch, str(key.role))
        data_key, index_key = object_key(*parts, "data"), object_key(*parts, "index")
        done = self._already(key) if self._already is not None else None
        if done is None and key in self._found:  # found at start: offloaded before the restart?
            done = self._in_store(index_key)
        if done is not None:  # overflowed (dataplane/overflow.py) or found in the store: no upload
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

    def _in_store(self, index_key: str) -> tuple[int, str] | None:
        """The size and BLAKE3 an index object already in the store records (None: none, or
        unreadable: the copy is uploaded again)."""
        size = self.objects.size(index_key)
        if size is None:
            return None
        try:
            body = json.loads(self.objects.get_range(index_key, 0, size))
            return int(body["size"]), str(body["blake3"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("index object %s is unreadable (%s): the copy is uploaded again", index_key, exc)
            return None
