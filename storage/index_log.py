"""A shuffle dir's index log: the indexes of the locations committed in it, in one file.

    <dir>/<app_id>/<shuffle_id>/index.log

Each line is one record (:mod:`croupier.storage.index_file`): a committed location's index
as ``encode_index`` writes it, or a void record (``encode_void``) that takes back the records
before it for its key. For each key, the last record that passes its checks wins. A line that
fails them (torn by a crash, damaged, of another version, or naming another shuffle) is
skipped with a warning; a void record is appended before a location of an earlier life is
written again, so the data written then is never read with the old index.

A commit appends its record with one ``write`` (and, with ``fsync`` on, one ``fsync``), so
committing a location makes no file. Before this log (issue 25), each commit created
``.index.tmp`` and renamed it to ``.index``: at 6,400 partitions, creating files was 42 % of
the workers' CPU here (ext4 without a journal scans for recently deleted inodes per create).

An append that fails is cut off again (``ftruncate``); if even that fails, or a crash tore the
last line, the next append of this life starts on a new line, so one torn record never takes
the next one with it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from croupier.storage._fds import FdCache, Handle, fsync_dir, writev_all
from croupier.storage.index_file import decode_record
from croupier.storage.store import ChunkIndex, LocationKey

__all__ = ["LOG_NAME", "IndexLog", "IndexLogs"]

LOG_NAME = "index.log"
_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC

log = logging.getLogger(__name__)


class IndexLog:
    """The index log of one shuffle dir (thread-safe).

    State:
        path: ``<dir>/<app_id>/<shuffle_id>/index.log``.
        _records: what the log holds, read at first use and kept up to date by this store's
            appends: ``key -> index`` (void records drop their key).
        _end: the log's size as this life knows it; None until it is checked (or after a
            failed append): the next append then checks that the log ends a line.
    """

    def __init__(self, path: Path, fds: FdCache, fsync: bool) -> None:
        self.path = path
        self._fds = fds
        self._fsync = fsync
        self._handle = Handle(path, _FLAGS)
        self._records: dict[LocationKey, ChunkIndex] | None = None
        self._end: int | None = None
        self._lock = threading.Lock()

    def records(self) -> dict[LocationKey, ChunkIndex]:
        """Each key's winning index (a copy). Raises OSError: the log cannot be read."""
        with self._lock:
            return dict(self._read())

    def get(self, key: LocationKey) -> ChunkIndex | None:
        """``key``'s winning index, or None. Raises OSError: the log cannot be read."""
        with self._lock:
            return self._read().get(key)

    def append(self, key: LocationKey, index: ChunkIndex | None, line: bytes) -> None:
        """Append one encoded record (``index`` None: a void record). Raises OSError."""
        with self._lock:
            records = self._read()
            new = self._end is None and not os.path.exists(self.path)
            with self._fds.use(self._handle) as fd:
                if self._end is None:
                    end = os.fstat(fd).st_size
                    if end and os.pread(fd, 1, end - 1) != b"\n":
                        line = b"\n" + line  # the last line is torn: it stays one bad line
                    self._end = end
                try:
                    writev_all(fd, [line])
                    if self._fsync:
                        os.fsync(fd)
                except OSError:
                    self._cut(fd, self._end)
                    raise
                self._end += len(line)
            if new and self._fsync:
                fsync_dir(self._fds, self.path.parent)  # the log's name is durable too
            if index is None:
                records.pop(key, None)
            else:
                records[key] = index

    def close(self) -> None:
        self._fds.discard(self._handle)

    def _cut(self, fd: int, end: int) -> None:
        try:
            os.ftruncate(fd, end)
        except OSError as exc:
            log.warning("cannot cut a failed append off %s: %s", self.path, exc)
            self._end = None  # the next append checks where the log ends

    def _read(self) -> dict[LocationKey, ChunkIndex]:
        if self._records is not None:
            return self._records
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        records: dict[LocationKey, ChunkIndex] = {}
        shuffle = (self.path.parent.parent.name, self.path.parent.name)
        for n, line in enumerate(raw.splitlines(), 1):
            if not line:
                continue
            try:
                key, index = decode_record(line)
                if (key.app_id, str(key.shuffle_id)) != shuffle:
                    raise ValueError(f"it names {key}, of another shuffle")
            except ValueError as exc:
                log.warning("skipping record %d of %s: %s", n, self.path, exc)
                continue
            if index is None:
                records.pop(key, None)
            else:
                records[key] = index
        self._records = records
        return records


class IndexLogs:
    """The index logs of one store, one per shuffle dir, made at first use (thread-safe)."""

    def __init__(self, fds: FdCache, fsync: bool) -> None:
        self._fds = fds
        self._fsync = fsync
        self._logs: dict[Path, IndexLog] = {}
        self._lock = threading.Lock()

    def of(self, directory: Path) -> IndexLog:
        """The log of the shuffle dir ``directory``."""
        with self._lock:
            found = self._logs.get(directory)
            if found is None:
                found = self._logs[directory] = IndexLog(directory / LOG_NAME, self._fds, self._fsync)
            return found

    def forget(self, app_dir: Path, shuffle_id: int | None) -> None:
        """The app's dir (or one shuffle's dir in it) was removed: drop their logs."""
        with self._lock:
            gone = [d for d in self._logs if d.parent == app_dir and shuffle_id in (None, int(d.name))]
            for d in gone:
                self._logs.pop(d).close()
