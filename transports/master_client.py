"""``MasterClient``: typed commands to the master, wherever the leader is.

``url`` is a list of masters (``tcp://a:p,tcp://b:p``), tried in turn, or a
ZooKeeper ensemble (``zk://h1:2181,h2:2181/root``), where the leader publishes
its address in ``<root>/leader``. Either way the client follows ``NOT_LEADER``
redirects and retries timeouts and ``UNAVAILABLE`` (for example during a leader
election) until ``deadline`` seconds have passed. Retried commands must be
idempotent: the master's are, when they carry their ids (DESIGN §4).

Replies are checked against their ``croupier.core.replies`` type by
``request``; ``call`` returns the raw JSON object (for tools that only print it).

Usage::

    with MasterClient("zk://127.0.0.1:2181/croupier") as master:
        status = master.request(Status(), StatusReply)
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Self, TypeVar

from croupier.core.commands import Command, encode_command
from croupier.core.errors import CroupierError, NotLeader, RequestTimeout, Unavailable
from croupier.core.leader_record import decode_leader
from croupier.core.replies import decode_reply
from croupier.core.urls import parse_master_url
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient
from croupier.transports.rpc import RpcClient

__all__ = ["MasterClient"]

log = logging.getLogger(__name__)

R = TypeVar("R")


class MasterClient:
    """Thread-safe client of the master (one RPC at a time).

    Parameters:
        url: ``tcp://h:p[,tcp://h:p...]`` or ``zk://hosts/root``.
        timeout: per-try reply timeout, seconds.
        attempts: at least this many tries before giving up ...
        deadline: ... and keep trying until this many seconds have passed (failovers; 0 = attempts only).
        backoff: the pause between rounds over all endpoints.
        curve: talk CURVE to the masters, with this server key.
        signer: signs every request (PROTOCOL §2.1): a member's, or an app's holding its
            app keys; None sends unsigned (only an open master, or PING/STATUS/REGISTER_APP).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        attempts: int = 10,
        deadline: float = 0.0,
        backoff: float = 0.2,
        curve: CurveClient | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._curve = curve
        self.signer = signer
        parsed = parse_master_url(url)
        self.url = url
        self._zk_hosts = ",".join(parsed.endpoints) if parsed.kind == "zk" else ""
        self._zk_root = parsed.root
        self._zk: Any = None
        self._endpoints = list(parsed.endpoints) if parsed.kind == "tcp" else []
        # behind ZooKeeper, a dead leader is noticed by a timeout: keep each try short so that
        # the client finds the new leader soon after the election
        self._timeout = min(timeout, 5.0) if self._zk_hosts else timeout
        self._attempts = attempts
        self._deadline = deadline
        self._backoff = backoff
        self._clients: dict[str, RpcClient] = {}
        self._current = 0
        self._lock = threading.Lock()
        self._closed = False

    def _client(self, endpoint: str) -> RpcClient:
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = RpcClient(
                endpoint, timeout=self._timeout, retries=0, curve=self._curve, signer=self.signer
            )
        return client

    def _resolve(self) -> None:
        """zk:// only: read the leader's URL from ``<root>/leader``."""
        if not self._zk_hosts:
            return
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError
        from kazoo.retry import KazooRetry

        try:
            if self._zk is None:
                self._zk = KazooClient(
                    hosts=self._zk_hosts,
                    timeout=10.0,
                    connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
                    read_only=True,
                )
                self._zk.start(timeout=self._timeout)
            data, _ = self._zk.get(f"{self._zk_root}/leader")
            leader = decode_leader(data).url
        except NoNodeError:
            raise Unavailable(f"no leader in {self.url} yet (an election is under way)") from None
        except CroupierError:
            raise
        except ValueError as exc:
            raise Unavailable(f"cannot read the leader from {self.url}: {exc}") from exc
        except Exception as exc:  # kazoo timeouts and connection errors
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None
            raise Unavailable(f"cannot read the leader from {self.url}: {exc}") from exc
        if leader not in self._endpoints:
            self._endpoints.append(leader)
        self._current = self._endpoints.index(leader)

    def request(self, command: Command, reply_type: type[R], *, timeout: float | None = None) -> R:
        """Send one command; return its reply, checked and built as ``reply_type``.

        Raises:
            InternalError: the reply does not have the shape of ``reply_type`` (the
                message names the field).
            CroupierError: the master refused the command, or no leader answered in time.
        """
        body = self.call(command, timeout=timeout)
        return decode_reply(reply_type, body, type(command).__name__)

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        """Send one command; return the reply body as JSON values, unchecked.

        Raises:
            CroupierError: the master refused the command, or no leader answered in time.
        """
        msg_type, body = encode_command(command)
        last: CroupierError | None = None
        with self._lock:
            if self._closed:
                raise Unavailable("MasterClient is closed")
            give_up = time.monotonic() + self._deadline
            attempt = 0
            while attempt < self._attempts or time.monotonic() < give_up:
                attempt += 1
                try:
                    if not self._endpoints or (self._zk_hosts and last is not None):
                        self._resolve()
                    endpoint = self._endpoints[self._current % len(self._endpoints)]
                    reply = self._client(endpoint).call(msg_type, body, timeout=timeout or self._timeout)
                    return reply.body
                except NotLeader as exc:
                    last = exc
                    leader = exc.leader
                    if leader and leader not in self._endpoints:
                        self._endpoints.append(leader)
                    self._current = self._endpoints.index(leader) if leader else self._current + 1
                    if not leader:
                        time.sleep(self._backoff)
                except (RequestTimeout, Unavailable) as exc:
                    last = exc
                    self._current += 1
                    if not self._endpoints or self._current % len(self._endpoints) == 0:
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
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
