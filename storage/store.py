"""The partition-store port, its value types, and the in-memory twin.

A worker keeps one **partition file** per location it hosts (DESIGN §10): the
batches pushed for one partition at one epoch, in one role, back to back. The
:class:`PartitionStore` port is everything the worker needs from its disks:

- ``create(key)`` opens a new, empty :class:`PartitionFile`; a flusher
  ``write``\\ s batches to it, and at shuffle commit the worker ``commit``\\ s
  it with the :class:`ChunkIndex` it built while appending
  (:class:`croupier.storage.index.IndexBuilder`).
- Committed files are served by ``read(key, offset, length)`` (a fetch reads
  one chunk at a time) and survive a restart: ``scan()`` finds them again.
- ``remove(app_id, shuffle_id)`` deletes a shuffle's (or an app's) files.

Contract, shared by every backend (:class:`MemoryPartitionStore`,
:class:`croupier.storage.disk.DiskPartitionStore`) and pinned by
``tests/storage/test_store_conformance.py``:

- Keys are validated (``BadRequest``) before anything else happens to them,
  so a bad id never reaches a path.
- A location is *open* from ``create`` until ``commit``/``abort``/``remove``,
  then *committed* (readable, immutable) or gone. Creating a location that is
  open or committed raises ``Conflict``; an uncommitted file left by an
  earlier life of the store (a crash) is discarded by ``create``.
- ``read`` raises ``NotCommitted`` for an open location, ``UnknownShuffle``
  for an unknown one, ``BadRequest`` for a range outside the file.
- Uncommitted data does not survive a close/reopen (like a crash).
- Every method is thread-safe. ``PartitionFile.write`` is called by one thread
  at a time per file, but different files are written concurrently (one
  flusher per disk), and ``read``/``remove`` may run from other threads.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from croupier.core import ids
from croupier.core.enums import CopyRole
from croupier.core.errors import BadRequest, Conflict, NotCommitted, Unavailable, UnknownShuffle

__all__ = [
    "ChunkIndex",
    "CommittedFile",
    "DirState",
    "LocationKey",
    "MemoryBacking",
    "MemoryPartitionFile",
    "MemoryPartitionStore",
    "PartitionFile",
    "PartitionStore",
    "check_range",
    "check_scope",
    "disk_for",
]


@dataclass(frozen=True, slots=True, order=True)
class LocationKey:
    """Names one partition location on a worker.

    Construction does not validate (keys are built from wire data); every store
    method calls :meth:`validate` before it uses a key. Keys sort by their
    fields in order (app, shuffle, partition, epoch, role).
    """

    app_id: str
    shuffle_id: int
    partition: int
    epoch: int
    role: str

    def validate(self) -> None:
        """Check every field.

        Raises:
            BadRequest: an invalid app id, a shuffle id, partition or epoch that
                is not an integer in ``0..2**31-1``, or a role other than
                ``"primary"``/``"replica"``.
        """
        ids.app_id(self.app_id)
        ids.int_id("shuffle_id", self.shuffle_id)
        ids.int_id("partition", self.partition)
        ids.int_id("epoch", self.epoch)
        if self.role not in tuple(CopyRole):
            raise BadRequest(f"role must be 'primary' or 'replica', not {self.role!r}")

    @property
    def name(self) -> str:
        """The file stem: ``<partition>-<epoch>-<role>``."""
        return f"{self.partition}-{self.epoch}-{self.role}"

    def to_json(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "shuffle_id": self.shuffle_id,
            "partition": self.partition,
            "epoch": self.epoch,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, d: Any) -> LocationKey:
        """Rebuild and validate a key.

        Raises:
            BadRequest: ``d`` is not a dict with exactly the five fields, or a field is invalid.
        """
        fields = ("app_id", "shuffle_id", "partition", "epoch", "role")
        if not isinstance(d, dict) or set(d) != set(fields):
            raise BadRequest(f"a location key needs exactly the fields {fields}")
        key = cls(d["app_id"], d["shuffle_id"], d["partition"], d["epoch"], d["role"])
        key.validate()
        return key


def _ints(value: Any, arity: int, what: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list | tuple):
        raise BadRequest(f"{what} must be a list")
    out = []
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) != arity
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)
        ):
            raise BadRequest(f"each of {what} must be {arity} non-negative integers, not {item!r}")
        out.append(tuple(item))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """What a committed partition file holds, written beside it at commit.

    State:
        chunks: ``(offset, length)`` of each chunk in file order. Chunks are cut
            at batch boundaries and tile the file (built by ``IndexBuilder``).
        batches: the number of data batches (seals not counted).
        seals: ``(map_id, attempt_id, count)`` of each distinct seal batch, sorted.
        size: bytes in the data file.
    """

    chunks: tuple[tuple[int, int], ...] = ()
    batches: int = 0
    seals: tuple[tuple[int, int, int], ...] = ()
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "chunks": [list(c) for c in self.chunks],
            "batches": self.batches,
            "seals": [list(s) for s in self.seals],
            "size": self.size,
        }

    @classmethod
    def from_json(cls, d: Any) -> ChunkIndex:
        """Rebuild an index from :meth:`to_json` output.

        Raises:
            BadRequest: a field is missing, of the wrong type or negative, or a
                chunk lies outside ``0..size``.
        """
        if not isinstance(d, dict) or set(d) != {"chunks", "batches", "seals", "size"}:
            raise BadRequest("a chunk index needs exactly the fields chunks, batches, seals, size")
        size, batches = d["size"], d["batches"]
        for name, v in (("size", size), ("batches", batches)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise BadRequest(f"chunk index {name} must be a non-negative integer, not {v!r}")
        chunks = _ints(d["chunks"], 2, "chunks")
        seals = _ints(d["seals"], 3, "seals")
        for off, length in chunks:
            if off + length > size:
                raise BadRequest(f"chunk ({off}, {length}) runs past the file size {size}")
        return cls(
            chunks=tuple((c[0], c[1]) for c in chunks),
            batches=batches,
            seals=tuple(sorted((s[0], s[1], s[2]) for s in seals)),
            size=size,
        )


@dataclass(frozen=True, slots=True)
class CommittedFile:
    """A committed, readable location and its index."""

    key: LocationKey
    index: ChunkIndex


@dataclass(frozen=True, slots=True)
class DirState:
    """One data directory's space and health, as a heartbeat reports it.

    State:
        path: the directory.
        free: bytes free for this process (``statvfs`` ``f_bavail * f_frsize``).
        total: the filesystem's size in bytes.
        reserve: new locations avoid the dir while ``free < reserve``.
        healthy: False once a write to it failed with anything but "no space".
    """

    path: str
    free: int
    total: int
    reserve: int
    healthy: bool

    @property
    def usable(self) -> bool:
        """Healthy, with free space at or above the reserve: it may get new locations."""
        return self.healthy and self.free >= self.reserve


@runtime_checkable
class PartitionFile(Protocol):
    """One open (not yet committed) location, written by one flusher.

    State:
        key: the location.
        disk: which of the store's dirs (``0..num_disks-1``) holds the file;
            the worker runs one flusher per disk and routes by this.
    """

    key: LocationKey
    disk: int

    @property
    def size(self) -> int:
        """Bytes written so far."""
        ...

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        """Append ``pieces`` in order, without copying them.

        Called by one thread at a time. A call either appends all of the
        pieces or (when it raises) leaves the file at its previous size, so it
        may be retried.

        Raises:
            Unavailable: the write failed (the message names the path and errno),
                the file is committed or aborted, or the store is closed.
        """
        ...

    def commit(self, index: ChunkIndex) -> CommittedFile:
        """Make the file durable and readable, with ``index`` beside it.

        Raises:
            Conflict: ``index.size`` differs from :attr:`size`, or the file was
                already committed, aborted or removed.
            Unavailable: the disk failed.
        """
        ...

    def abort(self) -> None:
        """Close the file and delete what was written. Idempotent; a no-op after commit."""
        ...


@runtime_checkable
class PartitionStore(Protocol):
    """A worker's partition files over ``num_disks`` disks. See the module docstring."""

    @property
    def num_disks(self) -> int: ...

    def dir_states(self) -> list[DirState]:
        """Each disk's free space, reserve and health, in disk order."""
        ...

    def create(self, key: LocationKey) -> PartitionFile:
        """Open a new, empty location.

        Raises:
            BadRequest: ``key`` is invalid (checked before any path is built).
            Conflict: the location is already open or committed.
            Unavailable: the store is closed or the disk failed.
        """
        ...

    def committed(self, key: LocationKey) -> CommittedFile | None:
        """The committed file for ``key``, or ``None`` (open, unknown or removed).

        Raises:
            BadRequest: ``key`` is invalid.
            Unavailable: the store is closed.
        """
        ...

    def read(self, key: LocationKey, offset: int, length: int) -> bytes:
        """``length`` bytes of a committed file from ``offset``.

        Raises:
            BadRequest: ``key`` is invalid, or the range is outside the file.
            NotCommitted: the location is open.
            UnknownShuffle: no such location.
            Unavailable: the store is closed or the disk failed.
        """
        ...

    def read_view(self, key: LocationKey, offset: int, length: int) -> bytes | memoryview:
        """``read`` for a reply: the bytes may be a view of a pooled buffer that is read into
        again once no reference to it is left. Hand it to the reply (a zero-copy frame) and
        keep no other reference; never keep it. Raises as ``read``.
        """
        ...

    def scan(self, app_id: str | None = None, shuffle_id: int | None = None) -> list[CommittedFile]:
        """Every committed location in the store, sorted by key (for a restarted worker); or
        only those of one app, or of one shuffle (``shuffle_id`` needs ``app_id``).

        Damaged or inconsistent files are skipped with a warning.

        Raises:
            BadRequest: ``app_id`` or ``shuffle_id`` is invalid.
            Unavailable: the store is closed or a directory cannot be listed.
        """
        ...

    def remove(self, app_id: str, shuffle_id: int | None = None) -> int:
        """Delete one shuffle's files, or all of an app's, committed or not.

        Open files for them are closed first. Returns the number of locations removed.

        Raises:
            BadRequest: ``app_id`` or ``shuffle_id`` is invalid.
            Unavailable: the store is closed or a file cannot be deleted.
        """
        ...

    def save_key_tag(self, app_id: str, tag: str) -> None:
        """Keep the key tag of ``app_id``'s registration beside its files (PROTOCOL §5.4), so that
        a restarted worker serves them again; "" for an app without one. A failure is logged,
        not raised: the files are then refused after a restart until the master sends the tag.

        Raises:
            BadRequest: ``app_id`` is invalid.
            Unavailable: the store is closed.
        """
        ...

    def key_tag(self, app_id: str) -> str | None:
        """The key tag kept for ``app_id``, or None (none kept, or the disks disagree: logged).

        Raises:
            BadRequest: ``app_id`` is invalid.
            Unavailable: the store is closed.
        """
        ...

    def close(self) -> None:
        """Release every resource (idempotent). Uncommitted files are left as a crash would leave
        them; their ``PartitionFile`` objects then raise Unavailable."""
        ...


def disk_for(key: LocationKey, num_disks: int) -> int:
    """The disk a new location goes to: a stable hash of the key, mod ``num_disks``.

    Stable (crc32, not ``hash()``) so that the choice does not depend on the
    process; hashing the whole key spreads the partitions of one shuffle, and
    their later epochs, over every disk.
    """
    if num_disks == 1:
        return 0
    text = f"{key.app_id}/{key.shuffle_id}/{key.name}".encode()
    return zlib.crc32(text) % num_disks


def check_range(key: LocationKey, offset: int, length: int, size: int) -> None:
    """Raises BadRequest unless ``0 <= offset``, ``0 <= length`` and ``offset + length <= size``."""
    for name, v in (("offset", offset), ("length", length)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise BadRequest(f"read {name} must be a non-negative integer, not {v!r}")
    if offset + length > size:
        raise BadRequest(
            f"read of {length} bytes at {offset} runs past the end of {key.app_id}/{key.shuffle_id}/"
            f"{key.name} ({size} bytes)"
        )


def _check_app(app_id: str, shuffle_id: int | None) -> None:
    ids.app_id(app_id)
    if shuffle_id is not None:
        ids.int_id("shuffle_id", shuffle_id)


def check_scope(app_id: str | None, shuffle_id: int | None) -> None:
    """The arguments of ``scan``: nothing, an app, or an app and one of its shuffles."""
    if app_id is not None:
        _check_app(app_id, shuffle_id)
    elif shuffle_id is not None:
        raise BadRequest("a shuffle_id needs its app_id")


def _matches(key: LocationKey, app_id: str, shuffle_id: int | None) -> bool:
    return key.app_id == app_id and (shuffle_id is None or key.shuffle_id == shuffle_id)


# -- the in-memory twin ---------------------------------------------------------------------------


@dataclass
class MemoryBacking:
    """What a :class:`MemoryPartitionStore` keeps across close and reopen, like its disks.

    State:
        files: committed locations: ``key -> (committed file, data, disk)``.
        key_tags: the key tag kept per app (``save_key_tag``), gone with its last file.
        lock: guards ``files`` and ``key_tags``.
    """

    files: dict[LocationKey, tuple[CommittedFile, bytes, int]] = field(default_factory=dict)
    key_tags: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryPartitionFile:
    """An open location of a :class:`MemoryPartitionStore`; data lives in a bytearray.

    State:
        key, disk: see :class:`PartitionFile`.
        _data: bytes written so far (copied in: this twin is for tests, not speed).
        _state: ``"open"``, ``"committed"``, ``"aborted"``, ``"removed"`` or ``"closed"``.
    """

    def __init__(self, store: MemoryPartitionStore, key: LocationKey, disk: int) -> None:
        self.key = key
        self.disk = disk
        self._store = store
        self._data = bytearray()
        self._state = "open"
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self._data)

    def written(self) -> bytes:
        """The bytes written so far (a store that moves an open file elsewhere reads them)."""
        with self._lock:
            return bytes(self._data)

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        with self._lock:
            if self._state != "open":
                raise Unavailable(f"cannot write to {self.key.name}: it is {self._state}")
            for piece in pieces:
                self._data += piece

    def commit(self, index: ChunkIndex) -> CommittedFile:
        with self._lock:
            if self._state == "closed":
                raise Unavailable(f"cannot commit {self.key.name}: the store is closed")
            if self._state != "open":
                raise Conflict(f"cannot commit {self.key.name}: it is {self._state}")
            if index.size != len(self._data):
                raise Conflict(f"index says {index.size} bytes, {self.key.name} holds {len(self._data)}")
            self._state = "committed"
            data = bytes(self._data)
            self._data = bytearray()
        done = CommittedFile(self.key, index)
        self._store._committed_file(self, done, data)
        return done

    def abort(self) -> None:
        with self._lock:
            if self._state != "open":
                return
            self._state = "aborted"
            self._data = bytearray()
        self._store._forget(self)

    def _kill(self, state: str) -> None:
        """Called by ``remove`` (state ``"removed"``) and ``close`` (``"closed"``): refuse further use."""
        with self._lock:
            if self._state == "open":
                self._state = state
                self._data = bytearray()


class MemoryPartitionStore:
    """The in-memory twin of :class:`croupier.storage.disk.DiskPartitionStore`.

    Parameters:
        backing: the "disks" to open: committed data from an earlier store
            (``MemoryPartitionStore(old.backing)`` simulates a restart); empty by default.
        num_disks: how many disks to pretend to have (for flusher routing).

    State:
        backing: shared committed data.
        _open: open locations of this store (lost on reopen, like a crash).
        _lock: guards ``_open`` and ``closed``; taken before ``backing.lock``.
    """

    def __init__(self, backing: MemoryBacking | None = None, num_disks: int = 1) -> None:
        if num_disks < 1:
            raise ValueError(f"num_disks must be positive, not {num_disks}")
        self.backing = backing if backing is not None else MemoryBacking()
        self._num_disks = num_disks
        self._open: dict[LocationKey, MemoryPartitionFile] = {}
        self._lock = threading.Lock()
        self.closed = False

    @property
    def num_disks(self) -> int:
        return self._num_disks

    def dir_states(self) -> list[DirState]:
        """Every pretend disk is healthy, with room to spare."""
        return [DirState(f"memory:{i}", 2**40, 2**40, 0, True) for i in range(self._num_disks)]

    def create(self, key: LocationKey) -> MemoryPartitionFile:
        key.validate()
        with self._lock:
            self._check_open()
            if key in self._open:
                raise Conflict(f"location {key.app_id}/{key.shuffle_id}/{key.name} is already open")
            with self.backing.lock:
                if key in self.backing.files:
                    raise Conflict(f"location {key.app_id}/{key.shuffle_id}/{key.name} is committed")
            f = MemoryPartitionFile(self, key, disk_for(key, self._num_disks))
            self._open[key] = f
            return f

    def committed(self, key: LocationKey) -> CommittedFile | None:
        key.validate()
        self._check_open()
        with self.backing.lock:
            entry = self.backing.files.get(key)
        return entry[0] if entry else None

    def read(self, key: LocationKey, offset: int, length: int) -> bytes:
        key.validate()
        with self._lock:
            self._check_open()
            if key in self._open:
                raise NotCommitted(f"location {key.app_id}/{key.shuffle_id}/{key.name} is not committed")
        with self.backing.lock:
            entry = self.backing.files.get(key)
        if entry is None:
            raise UnknownShuffle(f"no location {key.app_id}/{key.shuffle_id}/{key.name}")
        data = entry[1]
        check_range(key, offset, length, len(data))
        return data[offset : offset + length]

    def read_view(self, key: LocationKey, offset: int, length: int) -> bytes | memoryview:
        return self.read(key, offset, length)

    def scan(self, app_id: str | None = None, shuffle_id: int | None = None) -> list[CommittedFile]:
        check_scope(app_id, shuffle_id)
        self._check_open()
        with self.backing.lock:
            found = [
                entry[0]
                for k, entry in self.backing.files.items()
                if app_id is None or _matches(k, app_id, shuffle_id)
            ]
        return sorted(found, key=lambda c: c.key)

    def remove(self, app_id: str, shuffle_id: int | None = None) -> int:
        _check_app(app_id, shuffle_id)
        with self._lock:
            self._check_open()
            gone = [k for k in self._open if _matches(k, app_id, shuffle_id)]
            for k in gone:
                self._open.pop(k)._kill("removed")
            with self.backing.lock:
                dropped = [k for k in self.backing.files if _matches(k, app_id, shuffle_id)]
                for k in dropped:
                    del self.backing.files[k]
                if shuffle_id is None or not any(k.app_id == app_id for k in self.backing.files):
                    self.backing.key_tags.pop(app_id, None)
        return len(set(gone) | set(dropped))

    def save_key_tag(self, app_id: str, tag: str) -> None:
        ids.app_id(app_id)
        self._check_open()
        with self.backing.lock:
            self.backing.key_tags[app_id] = tag

    def key_tag(self, app_id: str) -> str | None:
        ids.app_id(app_id)
        self._check_open()
        with self.backing.lock:
            return self.backing.key_tags.get(app_id)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            for f in self._open.values():
                f._kill("closed")
            self._open.clear()

    # -- called by MemoryPartitionFile -----------------------------------------------------------

    def _committed_file(self, f: MemoryPartitionFile, done: CommittedFile, data: bytes) -> None:
        with self._lock:
            # A concurrent remove() may have dropped the location meanwhile; then it stays gone.
            if self._open.get(f.key) is not f:
                return
            del self._open[f.key]
            with self.backing.lock:
                self.backing.files[f.key] = (done, data, f.disk)

    def _forget(self, f: MemoryPartitionFile) -> None:
        with self._lock:
            if self._open.get(f.key) is f:
                del self._open[f.key]

    def _check_open(self) -> None:
        if self.closed:
            raise Unavailable("the partition store is closed")
