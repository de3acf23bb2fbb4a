"""``WriterLock``: the ``<root>/writer`` lock of a ZooKeeper event log (``croupier.ha.zklog``).

An ephemeral znode whose data names the one open writer (``<host>:<pid>:<token>``). It goes
with the writer's ZooKeeper session; a second writer gets ``LogLocked``. Every fenced write
also checks the znode's version (``zkfence.add_checks``), so a writer whose session expired
can no longer append.

Usage::

    lock = WriterLock(calls, "/croupier/writer")
    lock.take()            # LogLocked if another writer holds it
    ...                    # writes check lock.version
    lock.release()
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
import weakref

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from croupier.core.errors import Unavailable
from croupier.ha.eventlog import LogLocked
from croupier.ha.zkcalls import ZkCalls

__all__ = ["WriterLock"]

log = logging.getLogger("croupier.ha.zklog")


class WriterLock:
    """The writer lock of the log under ``calls.root``.

    State:
        version: the lock znode's version while held (None: not held).
        token: this writer's ``<host>:<pid>:<token>``, the znode's data.
        _taken: from ``take`` until ``release``: a second ``take`` of the same path over the same
            client in this process is refused before ZooKeeper is asked.
    """

    def __init__(self, calls: ZkCalls, path: str) -> None:
        self._calls = calls
        self.path = path
        self.version: int | None = None
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}".encode()
        self._taken = False

    def take(self) -> None:
        """Raises:
        LogLocked: another writer holds it (in this process, or anywhere while its session lives).
        Unavailable: ZooKeeper failed.
        """
        calls, root = self._calls, self._calls.root
        with _TAKEN_LOCK:
            for other in _TAKEN:
                if other._calls.zk is calls.zk and other.path == self.path and other._taken:
                    raise LogLocked(
                        f"event log {root} is already open for writing in this process; close it first",
                        {"root": root},
                    )
            self._taken = True
            _TAKEN.add(self)
        for _ in range(3):
            if self._try_take():
                return
        raise LogLocked(f"event log {root}: the writer lock kept changing hands", {"root": root})

    def _try_take(self) -> bool:
        """One try: True when taken; False when the holder just left (or was stale): try again."""
        calls, root = self._calls, self._calls.root
        try:
            calls.call(
                f"create {self.path}",
                calls.zk.create_async,
                self.path,
                self.token,
                None,
                True,
                expected=(NodeExistsError,),
            )
            self.version = 0
            return True
        except NodeExistsError:
            pass
        try:
            holder, stat = calls.call(
                f"read {self.path}", calls.zk.get_async, self.path, expected=(NoNodeError,)
            )
        except NoNodeError:
            return False  # the holder just left: try again
        if holder == self.token:
            self.version = stat.version  # our create landed before a connection loss
            return True
        client_id = calls.zk.client_id
        if client_id is not None and stat.ephemeralOwner == client_id[0]:
            # Left by a log of this very session whose close could not reach ZooKeeper;
            # no open log holds it (checked above), so it is stale.
            with contextlib.suppress(NoNodeError, BadVersionError):
                calls.call(
                    f"delete {self.path}",
                    calls.zk.delete_async,
                    self.path,
                    stat.version,
                    expected=(NoNodeError, BadVersionError),
                )
            return False
        raise LogLocked(
            f"event log {root} is already open by writer {holder.decode(errors='replace')!r}"
            f" ({self.path} exists until it closes or its ZooKeeper session expires)",
            {"root": root, "holder": holder.decode(errors="replace")},
        )

    def release(self) -> None:
        """Delete the lock znode if held; a failure only warns (it goes with the session). Idempotent."""
        with _TAKEN_LOCK:
            self._taken = False
            _TAKEN.discard(self)
        version, self.version = self.version, None
        if version is None:
            return
        calls = self._calls
        try:
            calls.call(
                f"delete {self.path}",
                calls.zk.delete_async,
                self.path,
                version,
                expected=(NoNodeError, BadVersionError),
            )
        except (NoNodeError, BadVersionError):
            pass  # gone with our session already, or someone else's by now
        except Unavailable as exc:
            # The ephemeral node goes with the session; reopening in this session takes it over.
            log.warning("event log %s: could not release %s: %s", calls.root, self.path, exc.message)


# Taken locks in this process, to refuse a second open over the same client before asking
# ZooKeeper (whose ephemeral node cannot tell two logs of one session apart).
_TAKEN: weakref.WeakSet[WriterLock] = weakref.WeakSet()
_TAKEN_LOCK = threading.Lock()
