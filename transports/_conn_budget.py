"""The connection budget: a process accepts connections only while it has descriptors to spare.

libzmq retries an ``accept`` that failed with ``EMFILE`` at once and forever, so a process out
of descriptors spins a core and answers nobody new. The budget keeps it from getting there:

    budget = soft RLIMIT_NOFILE - reserve,   reserve = max(64, soft // 10) by default

(the reserve is for log files, ZooKeeper, outgoing connections and libzmq's own descriptors).
Every server socket counts its live connections from its monitor (``EVENT_ACCEPTED`` +1,
``EVENT_DISCONNECTED`` -1); the :class:`ConnectionLedger` sums them over the process, and each
server's ZAP policy refuses (ZAP status 400) a new connection that would make the total exceed
the budget. The refused connection is closed at once; the ones already open are served as before.

State:
    ConnectionLedger.live: connections open on all counted server sockets of the process.
    ServerConnections.live / refused: this socket's open connections and its refusals so far.
"""

from __future__ import annotations

import logging
import resource
import threading
import time

import zmq

from croupier.transports._zap import ALLOW, ZapRequest, ZapVerdict

__all__ = ["DEFAULT_RESERVE_MIN", "LEDGER", "ConnectionLedger", "ServerConnections"]

logger = logging.getLogger(__name__)

DEFAULT_RESERVE_MIN = 64
REFUSED_TEXT = "connection budget exhausted"
_WARN_EVERY_S = 5.0


def descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE now in force (read each time: ``raise_fd_limit`` may raise it)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class ConnectionLedger:
    """The live connections of all counted server sockets of this process, against one budget.

    Parameters:
        reserve: descriptors kept back from connections; None means ``max(64, soft // 10)``.
    """

    def __init__(self, reserve: int | None = None) -> None:
        self.reserve = reserve
        self._lock = threading.Lock()
        self._live = 0

    @property
    def live(self) -> int:
        return self._live

    def budget(self) -> int:
        soft = descriptor_limit()
        reserve = self.reserve if self.reserve is not None else max(DEFAULT_RESERVE_MIN, soft // 10)
        return max(0, soft - reserve)

    def add(self, n: int) -> int:
        with self._lock:
            self._live = max(0, self._live + n)
            return self._live


LEDGER = ConnectionLedger()


class ServerConnections:
    """One server socket's connections: the monitor sink that counts them and the ZAP policy.

    Both run on the ZAP thread of the socket's context; ``live`` and ``refused`` may be read anywhere.
    """

    def __init__(self, name: str, ledger: ConnectionLedger = LEDGER) -> None:
        self.name = name
        self._ledger = ledger
        self.live = 0
        self.refused = 0
        self._last_warning = -_WARN_EVERY_S
        self._unwarned = 0
        self._closed = False

    def on_event(self, event: int, value: int) -> None:
        """Monitor sink: count accepted and ended connections."""
        if self._closed:
            return
        if event == zmq.EVENT_ACCEPTED:
            self.live += 1
            self._ledger.add(1)
        elif event == zmq.EVENT_DISCONNECTED and self.live > 0:
            self.live -= 1
            self._ledger.add(-1)

    def policy(self, request: ZapRequest) -> ZapVerdict:
        """ZAP policy: refuse when the process's live connections (this one included) exceed the budget."""
        live, budget = self._ledger.live, self._ledger.budget()
        if live <= budget:
            return ALLOW
        self.refused += 1
        self._warn(
            "connection from %s refused: %d live connections, connection budget %d",
            request.address,
            live,
            budget,
        )
        return ZapVerdict(400, REFUSED_TEXT)

    def close(self) -> None:
        """The socket is closed: its connections no longer count."""
        if not self._closed:
            self._closed = True
            self._ledger.add(-self.live)
            self.live = 0

    def _warn(self, msg: str, *args: object) -> None:
        # At most one warning per 5 s per socket; the ones in between are counted in the next.
        now = time.monotonic()
        if now - self._last_warning < _WARN_EVERY_S:
            self._unwarned += 1
            return
        more = f" ({self._unwarned} more since the last warning)" if self._unwarned else ""
        logger.warning("%s: " + msg + more, self.name, *args)
        self._last_warning, self._unwarned = now, 0
