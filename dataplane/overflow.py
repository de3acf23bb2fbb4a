"""``OverflowStore``: a worker's partition store that spills to the object store when its disks
are full (issue 26, "Overflow"), instead of refusing data with ``HARD_SPLIT``.

It wraps the worker's own store (the disks) and passes the ``PartitionStore`` conformance suite.
A location goes to the object store in one of two ways:

- **created there**: when ``create`` runs, no directory of the disks is usable (healthy with free
  space at or above its reserve: ``DirState.usable``), so a new location is written to the object
  store from its first byte (Celeborn picks its tier the same way, when it creates a file);
- **moved there**: a write to a disk file fails for lack of space on every directory (the disk
  store already tried to move it between them), or its commit fails: the bytes already on disk
  are streamed into the object, the call is written after them, and the disk file is deleted.
  The caller sees the write succeed; the location never fails for lack of space.

An overflowed location is one object written as a multipart upload in parts of ``part`` bytes
(``ObjectStore.open_writer``), under the key an offloaded copy gets
(``<app>/<shuffle>/<partition>-<epoch>-<role>.data``, ``transports/objstore.py``). It is
final only when the commit completes the upload: there is no temporary key and no rename (an
object store's rename is a copy), and a worker that dies before its commit leaves no object
(an incomplete multipart upload is never visible). The commit then writes the index object
(the chunk index, the size and the data's BLAKE3), exactly as the offload does, so readers find
it, check its digests and prove completeness as for any object copy, while the worker lives
(it serves the location with ranged GETs) and after it is gone (they read the objects).
The offload after commit uploads nothing for it: it reports the copy (``offloaded``), and the
master logs it as ``CopiesOffloaded`` with its size and digest, like every other object copy.

Durability is what the disks give before a commit: a batch is acknowledged once it is held in
memory on both of its workers; each copy is written to its own object (its own role's key).

Memory stays bounded: each open overflowed location holds at most two parts (the one filling,
the one uploading), and at most ``max_open`` locations are open in the object store at once (the
worker allows a quarter of its memory cap: ``max_open_for``). Past
that a location that needs the object store fails as a full disk did before (``HARD_SPLIT``):
the writer revives the partition elsewhere.

State (behind one lock): the open overflowed files, the committed overflowed locations (key ->
index and digest), counters (``stats``). Committed overflowed locations are known to this
worker's life only; after a restart readers find them in the object store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import blake3

from croupier.core.errors import Conflict, CroupierError, NotCommitted, Unavailable, UnknownShuffle
from croupier.storage.store import (
    ChunkIndex,
    CommittedFile,
    DirState,
    LocationKey,
    PartitionFile,
    PartitionStore,
    check_range,
    check_scope,
    disk_for,
)
from croupier.transports.objstore import (
    WRITER_PART,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    ObjectWriter,
    object_key,
)

__all__ = ["OverflowStore", "max_open_for", "overflowed_keys"]

log = logging.getLogger(__name__)

_STEP = 1 << 20  # the bytes of a disk file moved to the object store per read


def max_open_for(memory_cap: int, part: int = WRITER_PART) -> int:
    """The overflowed locations a worker with ``memory_cap`` keeps open at once: their parts
    (two each) take at most a quarter of the cap, and at least two are allowed."""
    return max(2, memory_cap // (8 * part))


def overflowed_keys(key: LocationKey) -> tuple[str, str]:
    """The data and index object keys of a location's copy (the offload's keys)."""
    parts = (key.app_id, key.shuffle_id, key.partition, key.epoch, str(key.role))
    return object_key(*parts, "data"), object_key(*parts, "index")


def _disk_bytes(file: PartitionFile) -> Iterator[bytes]:
    """The bytes written to an open disk (or memory twin) file, in steps of ``_STEP``."""
    size = file.size
    path = getattr(file, "data_path", None)
    if isinstance(path, Path):
        with path.open("rb") as f:
            done = 0
            while done < size:
                data = f.read(min(_STEP, size - done))
                if not data:
                    raise OSError(f"{path} holds {done} bytes, {size} were written")
                done += len(data)
                yield data
        return
    written = getattr(file, "written", None)
    if written is None:
        raise OSError(f"cannot read back the bytes of {file.key.name}")
    data = written()
    for at in range(0, size, _STEP):
        yield data[at : at + _STEP]


class _ObjectFile:
    """An open location written to the object store (see :class:`PartitionFile`)."""

    def __init__(self, owner: OverflowStore, key: LocationKey, disk: int, writer: ObjectWriter) -> None:
        self.key = key
        self.disk = disk
        self._owner = owner
        self._writer = writer
        self._hasher = blake3.blake3()
        self._size = 0
        self._state = "open"
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        with self._lock:
            if self._state != "open":
                raise Unavailable(f"cannot write to {self.key.name} in the object store: it is {self._state}")
            try:
                for piece in pieces:
                    self._writer.write(piece)
                    self._hasher.update(piece)
                    self._size += len(piece)
            except ObjectStoreError as exc:  # the upload is gone: nothing of it can be kept
                self._state = "failed"
                self._writer.abort()
                raise Unavailable(f"cannot write {self.key.name} to the object store: {exc}") from exc
            self._owner.count_bytes(sum(len(p) for p in pieces))

    def commit(self, index: ChunkIndex) -> CommittedFile:
        with self._lock:
            if self._state != "open":
                raise Unavailable(f"cannot commit {self.key.name} in the object store: it is {self._state}")
            if index.size != self._size:
                raise Conflict(f"index says {index.size} bytes, {self.key.name} holds {self._size}")
            index_key = overflowed_keys(self.key)[1]
            digest = self._hasher.hexdigest()
            body = {"index": index.to_json(), "size": self._size, "blake3": digest}
            try:
                self._writer.close()  # the data object is final, whole
                # the index last: an index object means its data object is whole
                self._owner.objects.put(index_key, json.dumps(body, sort_keys=True).encode())
            except ObjectStoreError as exc:
                self._state = "failed"
                self._writer.abort()
                raise Unavailable(f"cannot commit {self.key.name} to the object store: {exc}") from exc
            self._state = "committed"
        done = CommittedFile(self.key, index)
        self._owner.committed_object(self, done, digest)
        return done

    def abort(self) -> None:
        with self._lock:
            if self._state in ("committed", "aborted"):
                return
            self._state = "aborted"
            self._writer.abort()
        self._owner.forget(self)

    def kill(self) -> None:
        """The store removed the location or closed: give the upload up."""
        with self._lock:
            if self._state == "open":
                self._state = "removed"
                self._writer.abort()


class _TieredFile:
    """A location that starts on disk and moves to the object store when the disk is full."""

    def __init__(self, owner: OverflowStore, inner: PartitionFile) -> None:
        self.key = inner.key
        self.disk = inner.disk
        self._owner = owner
        self._inner = inner
        self._object: _ObjectFile | None = None

    @property
    def size(self) -> int:
        return self._object.size if self._object is not None else self._inner.size

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        if self._object is None:
            try:
                self._inner.write(pieces)
                return
            except Unavailable as exc:
                if not exc.details.get("no_space"):
                    raise
                self._object = self._owner.move(self._inner, exc)
        self._object.write(pieces)

    def commit(self, index: ChunkIndex) -> CommittedFile:
        if self._object is None:
            try:
                return self._inner.commit(index)
            except Unavailable as exc:  # the disk failed the commit: the object store takes it
                self._object = self._owner.move(self._inner, exc)
        return self._object.commit(index)

    def abort(self) -> None:
        if self._object is not None:
            self._object.abort()
        self._inner.abort()


class OverflowStore:
    """Parameters:
    inner: the worker's disks.
    objects: the object store (closed with this store).
    part: the part size of each overflowed location's upload.
    max_open: overflowed locations open at once (each holds at most two parts in memory).
    """

    def __init__(
        self, inner: PartitionStore, objects: ObjectStore, *, part: int = WRITER_PART, max_open: int = 32
    ) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, not {max_open}")
        self.inner = inner
        self.objects = objects
        self._part = part
        self._max_open = max_open
        self._lock = threading.Lock()
        self._open: dict[LocationKey, _ObjectFile] = {}
        self._committed: dict[LocationKey, tuple[CommittedFile, str]] = {}
        self._stats = {"created": 0, "moved": 0, "committed": 0, "bytes": 0, "refused": 0}
        self._closed = False

    # -- the PartitionStore port -------------------------------------------------------------

    @property
    def num_disks(self) -> int:
        return self.inner.num_disks

    def dir_states(self) -> list[DirState]:
        return self.inner.dir_states()

    def create(self, key: LocationKey) -> PartitionFile:
        key.validate()
        with self._lock:
            if key in self._open or key in self._committed:
                raise Conflict(f"location {key.app_id}/{key.shuffle_id}/{key.name} is open or committed")
        if any(st.usable for st in self.inner.dir_states()):
            return _TieredFile(self, self.inner.create(key))
        if self.inner.committed(key) is not None:
            raise Conflict(f"location {key.app_id}/{key.shuffle_id}/{key.name} is committed")
        return self._open_object(key, disk_for(key, self.inner.num_disks), "created")

    def committed(self, key: LocationKey) -> CommittedFile | None:
        key.validate()
        with self._lock:
            if key in self._open:
                return None
            found = self._committed.get(key)
        return found[0] if found is not None else self.inner.committed(key)

    def read(self, key: LocationKey, offset: int, length: int) -> bytes:
        return cast(bytes, self._read(key, offset, length, lend=False))

    def read_view(self, key: LocationKey, offset: int, length: int) -> bytes | memoryview:
        return self._read(key, offset, length, lend=True)

    def _read(self, key: LocationKey, offset: int, length: int, *, lend: bool) -> bytes | memoryview:
        key.validate()
        with self._lock:
            found = self._committed.get(key)
            opened = key in self._open
        if opened:
            raise NotCommitted(f"{key.app_id}/{key.shuffle_id}/{key.name} is not committed yet")
        if found is None:
            return self.inner.read_view(key, offset, length) if lend else self.inner.read(key, offset, length)
        check_range(key, offset, length, found[0].index.size)
        if not length:
            return b""
        try:
            return self.objects.get_range(overflowed_keys(key)[0], offset, length)
        except ObjectNotFound as exc:
            raise UnknownShuffle(f"{key.name}: its object is gone: {exc}") from exc
        except ObjectStoreError as exc:
            raise Unavailable(f"{key.name}: reading its object failed: {exc}") from exc

    def scan(self, app_id: str | None = None, shuffle_id: int | None = None) -> list[CommittedFile]:
        check_scope(app_id, shuffle_id)
        with self._lock:
            ours = [
                cf
                for k, (cf, _) in self._committed.items()
                if app_id is None or (k.app_id == app_id and shuffle_id in (None, k.shuffle_id))
            ]
        return sorted([*self.inner.scan(app_id, shuffle_id), *ours], key=lambda cf: cf.key)

    def remove(self, app_id: str, shuffle_id: int | None = None) -> int:
        """The disks' files and the overflowed locations (their objects are deleted with the
        shuffle's other objects, by the offloader's ``delete``)."""
        removed = self.inner.remove(app_id, shuffle_id)
        with self._lock:
            keys = [
                k
                for k in (*self._open, *self._committed)
                if k.app_id == app_id and shuffle_id in (None, k.shuffle_id)
            ]
            files = [self._open.pop(k) for k in keys if k in self._open]
            for k in keys:
                self._committed.pop(k, None)
        for f in files:
            f.kill()
        return removed + len(keys)

    def save_key_tag(self, app_id: str, tag: str) -> None:
        self.inner.save_key_tag(app_id, tag)

    def key_tag(self, app_id: str) -> str | None:
        return self.inner.key_tag(app_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            files, self._open = list(self._open.values()), {}
        for f in files:
            f.kill()
        self.inner.close()
        self.objects.close()

    # -- overflow ----------------------------------------------------------------------------

    def offloaded(self, key: LocationKey) -> tuple[int, str] | None:
        """``(size, blake3)`` of an overflowed committed location: already in the object store."""
        with self._lock:
            found = self._committed.get(key)
        return None if found is None else (found[0].index.size, found[1])

    def stats(self) -> dict[str, int]:
        """Locations created in / moved to the object store, committed there, bytes, refusals."""
        with self._lock:
            return {**self._stats, "open": len(self._open)}

    def _open_object(self, key: LocationKey, disk: int, how: str) -> _ObjectFile:
        with self._lock:
            if self._closed:
                raise Unavailable(
                    f"cannot write {key.app_id}/{key.shuffle_id}/{key.name}: the store is closed"
                )
            if len(self._open) >= self._max_open:
                self._stats["refused"] += 1
                raise Unavailable(
                    f"cannot write {key.app_id}/{key.shuffle_id}/{key.name}: the disks are full and"
                    f" {self._max_open} locations are already open in the object store",
                    {"no_space": True},
                )
            f = _ObjectFile(self, key, disk, self.objects.open_writer(overflowed_keys(key)[0], self._part))
            self._open[key] = f
            self._stats[how] += 1
        log.warning(
            "%s/%s/%s goes to the object store: the disks are full", key.app_id, key.shuffle_id, key.name
        )
        return f

    def move(self, inner: PartitionFile, cause: CroupierError) -> _ObjectFile:
        """Stream what ``inner`` holds into a new object file, then delete it from the disk.

        Raises:
            Unavailable: the object store cannot take it either (``cause`` stands)."""
        f = self._open_object(inner.key, inner.disk, "moved")
        try:
            for data in _disk_bytes(inner):  # 1 MiB at a time: memory stays bounded
                f.write([data])
        except (OSError, Unavailable) as exc:
            f.abort()
            raise Unavailable(
                f"{cause.message}; moving it to the object store failed: {exc}", cause.details
            ) from exc
        with contextlib.suppress(CroupierError):
            inner.abort()
        return f

    def count_bytes(self, n: int) -> None:
        with self._lock:
            self._stats["bytes"] += n

    def committed_object(self, f: _ObjectFile, done: CommittedFile, digest: str) -> None:
        with self._lock:
            if self._open.pop(f.key, None) is f:
                self._committed[f.key] = (done, digest)
                self._stats["committed"] += 1

    def forget(self, f: _ObjectFile) -> None:
        with self._lock:
            if self._open.get(f.key) is f:
                del self._open[f.key]
