"""``Registration``: a worker's registration with the master, then its heartbeats.

One thread (``worker-heartbeat``) registers until the master accepts, then sends a
heartbeat at once and every ``interval`` after, with the load just sampled, each data
directory's free space, reserve and health (issue 15), and a page
of the shuffles this worker holds; the ones the master answers it does not know go to
the ``OrphanSweep`` (so a worker reconciles as soon as it starts, and at every beat).
A master that no longer knows this incarnation (it restarted without this worker, or
declared it lost) answers ``UNKNOWN_WORKER``, and the thread registers again. An unreachable master is logged
and tried again at the next beat. Each reply's ``status`` goes to ``on_status``: that is how
a worker learns it is decommissioning (its PUSHes then split hard) and then drained.

The master's replies also say its ``worker_timeout`` (PROTOCOL §4). Unless the interval was
set explicitly, the worker then beats every 10 s at most and at most a third of that
timeout, and follows a later reply that says another one (a new leader); an explicit
interval longer than a third of it is kept, with a warning naming both.

State: ``registered`` (an event) and ``load``, the figures sent last (read from any
thread; replaced whole, never mutated).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from croupier.core.codec import from_json
from croupier.core.commands import MAX_DIRS, RegisterWorker, WorkerHeartbeat
from croupier.core.config import heartbeat_every, heartbeat_too_slow
from croupier.core.errors import CroupierError, UnknownWorker
from croupier.core.replies import WorkerHeartbeatReply
from croupier.dataplane.orphans import OrphanSweep
from croupier.dataplane.pushed import PushedBytes
from croupier.storage.store import DirState
from croupier.transports.master_client import MasterClient

__all__ = ["Registration"]

log = logging.getLogger(__name__)

_RETRY_S = 0.5  # between registration attempts, before the first beat


def _worker_timeout(body: object) -> float | None:
    """A ``REGISTER_WORKER`` or ``WORKER_HEARTBEAT`` reply's ``worker_timeout`` (seconds), or
    None: a master that does not say it (older), or a value that is not a positive number."""
    value = body.get("worker_timeout") if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


class Registration:
    """Parameters:
    master: the client to the master; owned from now on (``stop`` closes it).
    register: the registration to send, with this worker's ports and incarnation.
    interval: seconds between heartbeats, as configured (None: chosen from the master's
        worker timeout, ``heartbeat_every``).
    sample_load: ``(disk_util, io_wait)`` since the previous call.
    pending_flush: the memory cap's share held unflushed.
    orphans: what to ask the master about with each beat (None: nothing).
    pushed: the bytes in flight per shuffle, reported with each beat (None: not reported).
    on_status: called with the status of every heartbeat reply (decommissioning, drained).
    dirs: each data directory's free space, reserve and health, reported with each beat
        (None: not reported).
    overflow: full disks spill to an object store (issue 26): said with each beat.
    """

    def __init__(
        self,
        master: MasterClient,
        register: RegisterWorker,
        *,
        interval: float | None,
        sample_load: Callable[[], tuple[float, float]],
        pending_flush: Callable[[], float],
        orphans: OrphanSweep | None = None,
        pushed: PushedBytes | None = None,
        on_status: Callable[[str], None] | None = None,
        dirs: Callable[[], list[DirState]] | None = None,
        http_port: int | None = None,
        overflow: bool = False,
    ) -> None:
        self._on_status = on_status
        self.http_port = http_port  # reported in every heartbeat
        self.overflow = overflow  # so is whether full disks spill to an object store
        self._pushed = pushed
        self._dirs = dirs
        self._master = master
        self._register = register
        self._configured = interval
        self._timeout: float | None = None  # the master's worker timeout, as last told
        self.interval = heartbeat_every(interval, None)
        self._sample_load = sample_load
        self._pending_flush = pending_flush
        self._orphans = orphans
        self.load: dict[str, float] = {"disk_util": 0.0, "io_wait": 0.0}
        self._registered = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="worker-heartbeat", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the master client. Idempotent."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._master.close()

    def wait(self, timeout: float) -> bool:
        """Whether the master accepted the registration within ``timeout`` seconds."""
        return self._registered.wait(timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self._registered.is_set():
                    body = self._master.call(self._register)
                    self._registered.set()
                    log.info("registered with the master as %s", self._register.worker_id)
                    self._told(_worker_timeout(body), registering=True)
                self._beat()
            except UnknownWorker:
                log.warning("the master does not know this incarnation; registering again")
                self._registered.clear()
                continue
            except CroupierError as exc:
                log.warning("master unreachable: %s", exc)
            self._stopping.wait(self.interval if self._registered.is_set() else _RETRY_S)

    def _told(self, timeout: float | None, *, registering: bool = False) -> None:
        """Beat against the master's worker ``timeout`` (None: a master that does not say)."""
        if timeout is None or (timeout == self._timeout and not registering):
            return
        self._timeout = timeout
        self.interval = heartbeat_every(self._configured, timeout)
        if heartbeat_too_slow(self._configured, timeout):
            log.warning(
                "the heartbeat interval %gs (--heartbeat) is more than a third of the master's worker"
                " timeout %gs: one late beat gets this worker declared lost; set --heartbeat %gs or"
                " less, or leave it unset",
                self._configured,
                timeout,
                timeout / 3,
            )
        else:
            log.info("the master's worker timeout is %gs: heartbeats every %gs", timeout, self.interval)

    def _dir_reports(self) -> tuple[tuple[str, int, int, int, bool], ...] | None:
        if self._dirs is None:
            return None
        return tuple((d.path, d.free, d.total, d.reserve, d.healthy) for d in self._dirs()[:MAX_DIRS])

    def _beat(self) -> None:
        disk_util, io_wait = self._sample_load()
        self.load = {"disk_util": round(disk_util, 3), "io_wait": round(io_wait, 3)}
        seq, held = self._orphans.page() if self._orphans is not None else (0, None)
        body = self._master.call(
            WorkerHeartbeat(
                self._register.worker_id,
                self._register.incarnation,
                disk_util=disk_util,
                io_wait=io_wait,
                pending_flush=min(1.0, self._pending_flush()),
                held=held,
                pushed=self._pushed.report() if self._pushed is not None else None,
                dirs=self._dir_reports(),
                http_port=self.http_port,
                overflow=self.overflow or None,
            )
        )
        self._told(_worker_timeout(body))
        if self._on_status is None and not (self._orphans is not None and held):
            return
        reply = from_json(WorkerHeartbeatReply, body)
        if self._orphans is not None and held and reply.unknown:
            self._orphans.unknown(seq, held, reply.unknown)
        if self._on_status is not None:
            self._on_status(reply.status)
