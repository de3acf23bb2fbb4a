"""``MasterClient``: typed commands to the master, over a list of master endpoints.

It tries the endpoints in turn on timeouts and ``UNAVAILABLE``, and follows
``NOT_LEADER`` redirects (the follower names the leader). ZooKeeper discovery
(``zk://``) arrives with the HA ensemble.

Usage::

    with MasterClient("tcp://127.0.0.1:9097") as master:
        reply = master.call(Status())
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Self

from croupier.core.commands import Command, encode_command
from croupier.core.errors import CroupierError, NotLeader, RequestTimeout, Unavailable
from croupier.core.urls import parse_master_url
from croupier.transports.rpc import RpcClient

__all__ = ["MasterClient"]

log = logging.getLogger(__name__)


class MasterClient:
    """Thread-safe client of the master (one RPC at a time per endpoint).

    Parameters:
        url: ``tcp://h:p[,tcp://h:p...]``.
        timeout: per-try reply timeout, seconds.
        attempts: how many endpoint tries (with redirects) before giving up.
        backoff: the pause between rounds over all endpoints.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, attempts: int = 10, backoff: float = 0.2) -> None:
        parsed = parse_master_url(url)
        if parsed.kind != "tcp":
            raise ValueError(f"{url}: ZooKeeper discovery (zk://) needs the HA ensemble, not built yet")
        self.url = url
        self._endpoints = list(parsed.endpoints)
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = backoff
        self._clients: dict[str, RpcClient] = {}
        self._current = 0
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, endpoint: str) -> RpcClient:
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = RpcClient(endpoint, timeout=self._timeout, retries=0)
        return client

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        """Send one command; return the reply body.

        Raises:
            CroupierError: the master refused the command (not retried unless retriable
                and caused by leadership or availability), or no master answered.
        """
        msg_type, body = encode_command(command)
        last: CroupierError | None = None
        with self._lock:
            if self._closed:
                raise Unavailable("MasterClient is closed")
            for attempt in range(self._attempts):
                endpoint = self._endpoints[self._current % len(self._endpoints)]
                try:
                    reply = self._client(endpoint).call(msg_type, body, timeout=timeout or self._timeout)
                    return reply.body
                except NotLeader as exc:
                    last = exc
                    leader = exc.leader
                    if leader and leader not in self._endpoints:
                        self._endpoints.append(leader)
                    self._current = self._endpoints.index(leader) if leader else self._current + 1
                except (RequestTimeout, Unavailable) as exc:
                    last = exc
                    self._current += 1
                if attempt % len(self._endpoints) == len(self._endpoints) - 1:
                    time.sleep(self._backoff)
        assert last is not None
        log.warning("no master answered %s: %s", type(command).__name__, last)
        raise last

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
