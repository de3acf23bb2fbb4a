"""Wiring for one embedded master: an event log and a ``MasterFront`` serving it.

Usage::

    with MasterService("tcp://127.0.0.1:0", data_dir="/var/lib/croupier") as master:
        print(master.url)

``data_dir=None`` keeps the log in memory (tests only: nothing survives a restart).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable
from typing import Self

from croupier.actors.master_front import MasterFront
from croupier.core.config import MasterConfig
from croupier.core.replies import MasterInfo
from croupier.ha.eventlog import EventLog, MemoryEventLog
from croupier.ha.filelog import FileEventLog
from croupier.ha.timedlog import TimedLog
from croupier.ops.http import HttpEndpoint, start_master_http
from croupier.ops.metrics import MasterMetrics
from croupier.services._lifecycle import Service, raise_fd_limit
from croupier.transports.curve import CurveServer
from croupier.transports.secret import ClusterSecret

__all__ = ["MasterService"]

log = logging.getLogger(__name__)


class MasterService(Service):
    """One master process's parts, started and stopped together.

    Parameters:
        listen: a ZeroMQ bind endpoint (``tcp://HOST:PORT``; port 0 = any free port).
        data_dir: where the file log and snapshots live; None = in memory.
        config: timeouts and intervals.
        clock: wall-clock seconds; tests pass a fake one and call ``tick()``.
        rng: randomness for placement and ids.
        event_log: use this log instead of one in ``data_dir``.
        curve: serve CURVE with this key pair, and talk CURVE to the workers (``--curve``).
        secret: the cluster secret (PROTOCOL §2.1): requests are checked against it and the
            master's requests to workers are member-signed. None (library use) accepts every request.
        http: ``HOST:PORT`` of the HTTP endpoint (``/metrics``, ``/api/v1``, the status page;
            port 0 = any free port); None = none. Unauthenticated: bind it like an admin port.
    """

    def __init__(
        self,
        listen: str = "tcp://127.0.0.1:9097",
        data_dir: str | os.PathLike[str] | None = None,
        *,
        config: MasterConfig | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        event_log: EventLog | None = None,
        curve: CurveServer | None = None,
        secret: ClusterSecret | None = None,
        http: str | None = None,
    ) -> None:
        self.config = config or MasterConfig()
        self.metrics = MasterMetrics()  # Prometheus, in a registry of its own (croupier.ops)
        self._http_listen = http
        self.http: HttpEndpoint | None = None
        self._data_dir = data_dir
        self._given_log = event_log
        self._log: EventLog | None = None
        self._front = MasterFront(
            listen,
            name="master",
            config=self.config,
            clock=clock,
            rng=rng,
            curve=curve,
            secret=secret,
            identity=_log_identity(data_dir) if event_log is None else "",
        )
        self._front.watch = self.metrics.watch
        self.metrics.collect(self._front.status)

    @property
    def url(self) -> str:
        return self._front.url

    def start(self) -> Self:
        try:
            # one descriptor per client connection: a short limit made libzmq spin on EMFILE
            log.debug("descriptor limit %d", raise_fd_limit())
            if self._given_log is not None:
                self._log = self._given_log
            elif self._data_dir is not None:
                self._log = FileEventLog(self._data_dir)
            else:
                self._log = MemoryEventLog()
            # bind first so that the URL (port 0) is known for status replies
            self._front.start()
            self.http = start_master_http(self._http_listen, self.metrics, self._front)
            self._front.http_url = self.http.url if self.http is not None else None
            self._front.serve(TimedLog(self._log, self.metrics.appended))
        except BaseException:
            self.stop()
            raise
        log.info(
            "master serving on %s (log: %s%s)",
            self.url,
            self._data_dir or "memory",
            ", CURVE" if self._front.curve is not None else "",
        )
        return self

    def stop(self) -> None:
        """Stop serving, commit what is queued, close the log. Idempotent."""
        if self.http is not None:
            self.http.stop()
            self.http = None
        self._front.stop()
        if self._log is not None and self._given_log is None:
            self._log.close()
        self._log = None

    def tick(self, now: float | None = None) -> None:
        """Run one liveness sweep (the ticker thread does this every ``sweep_interval``)."""
        self._front.tick(now)

    def describe(self) -> MasterInfo:
        """The actor's soft state, for tests and the CLI."""
        return self._front.describe()


def _log_identity(data_dir: str | os.PathLike[str] | None) -> str:
    """Where a file log lives (host and real path), the same across restarts; "" in memory."""
    if data_dir is None:
        return ""
    return f"file:{socket.gethostname()}:{os.path.realpath(data_dir)}"
