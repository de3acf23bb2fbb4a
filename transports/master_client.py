"""``MasterClient``: typed commands to the master, wherever the leader is.

``url`` is a list of masters (``tcp://a:p,tcp://b:p``), tried in turn, or a
ZooKeeper ensemble (``zk://h1:2181,h2:2181/root``), where the leader publishes
its address in ``<root>/leader``: a ``LeaderLookup`` reads it (the port; its ZooKeeper
implementation is ``croupier.ha.leader_lookup``, found through the ``croupier.leader_lookups``
entry point unless one is passed in). Either way the client follows ``NOT_LEADER``
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
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, cast

from croupier.core.commands import Command, MapperEnd, encode_command
from croupier.core.errors import CroupierError, NotLeader, RequestTimeout, Unavailable
from croupier.core.replies import MapperEndReply, decode_reply
from croupier.core.urls import parse_master_url
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient
from croupier.transports.end_coalescer import EndCoalescer
from croupier.transports.rpc import RpcClient

__all__ = ["LeaderLookup", "MasterClient"]

log = logging.getLogger(__name__)

R = TypeVar("R")


class LeaderLookup(Protocol):
    """Where the leader of a ``zk://`` URL's ensemble is (the port ``MasterClient`` asks)."""

    def __call__(self) -> str:
        """The leader's ``tcp://`` URL. Raises ``Unavailable`` while there is none."""
        ...

    def close(self) -> None: ...


# url, timeout -> the lookup for that zk:// URL
LeaderLookupFactory = Callable[[str, float], LeaderLookup]


def _installed_lookup(url: str, timeout: float) -> LeaderLookup:
    """The lookup of the installed ``croupier.leader_lookups`` entry point ``zk`` (``croupier.ha``).

    Raises:
        Unavailable: none is installed.
    """
    from importlib.metadata import entry_points

    found = entry_points(group="croupier.leader_lookups", name="zk")
    if not found:
        raise Unavailable(f"cannot follow {url}: no leader lookup is installed (croupier.leader_lookups:zk)")
    lookup: LeaderLookup = next(iter(found)).load()(url, timeout)
    return lookup


class MasterClient:
    """Thread-safe client of the master (one RPC at a time). ``MapperEnd``s of concurrent
    callers are sent together as ``MAPPER_END_BATCH`` (``ends``, an ``EndCoalescer``).

    Parameters:
        url: ``tcp://h:p[,tcp://h:p...]`` or ``zk://hosts/root``.
        timeout: per-try reply timeout, seconds.
        attempts: at least this many tries before giving up ...
        deadline: ... and keep trying until this many seconds have passed (failovers; 0 = attempts only).
        backoff: the pause between rounds over all endpoints.
        curve: talk CURVE to the masters, with this server key.
        signer: signs every request (PROTOCOL §2.1): a member's, or an app's holding its
            app keys; None sends unsigned (only an open master, or PING/STATUS/REGISTER_APP).
        leader_lookup: makes the ``LeaderLookup`` of a ``zk://`` URL (default: the installed one).

    State:
        _lock: guards the endpoints, the current one and the RPC clients; never held while a
            request is in flight, a lookup runs or the client sleeps between tries, so that
            ``close`` and other threads' calls never wait for one call's retries.
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
        leader_lookup: LeaderLookupFactory | None = None,
    ) -> None:
        self._curve = curve
        self.signer = signer
        parsed = parse_master_url(url)
        self.url = url
        behind_zk = parsed.kind == "zk"
        self._endpoints = list(parsed.endpoints) if parsed.kind == "tcp" else []
        # behind ZooKeeper, a dead leader is noticed by a timeout: keep each try short so that
        # the client finds the new leader soon after the election
        self._timeout = min(timeout, 5.0) if behind_zk else timeout
        self._lookup: LeaderLookup | None = None
        if behind_zk:
            self._lookup = (leader_lookup or _installed_lookup)(url, self._timeout)
        self._attempts = attempts
        self._deadline = deadline
        self._backoff = backoff
        self._clients: dict[str, RpcClient] = {}
        self._current = 0
        self._lock = threading.Lock()
        self._closed = False
        self.ends = EndCoalescer(self.call)  # concurrent MapperEnds, sent together

    def _client(self, endpoint: str) -> RpcClient:
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = RpcClient(
                endpoint, timeout=self._timeout, retries=0, curve=self._curve, signer=self.signer
            )
        return client

    def _pick(self, resolve: bool) -> RpcClient:
        """The client of the endpoint to try next; with a lookup (zk://), ask it first when there
        is no endpoint yet or ``resolve`` (the last try failed).

        Raises:
            Unavailable: closed, or the lookup failed.
        """
        with self._lock:
            self._check_open()
            ask = self._lookup if self._lookup is not None and (resolve or not self._endpoints) else None
        leader = ask() if ask is not None else None  # ZooKeeper I/O: outside the lock
        with self._lock:
            self._check_open()
            if leader is not None:
                if leader not in self._endpoints:
                    self._endpoints.append(leader)
                self._current = self._endpoints.index(leader)
            return self._client(self._endpoints[self._current % len(self._endpoints)])

    def _check_open(self) -> None:
        # lock held
        if self._closed:
            raise Unavailable("MasterClient is closed")

    def _redirected(self, leader: str | None) -> float:
        """After NOT_LEADER: follow its leader hint, else move on; the pause before the next try."""
        with self._lock:
            if leader and leader not in self._endpoints:
                self._endpoints.append(leader)
            self._current = self._endpoints.index(leader) if leader else self._current + 1
        return 0.0 if leader else self._backoff

    def _failed(self) -> float:
        """After a timeout or UNAVAILABLE: the next endpoint; a pause after a whole round."""
        with self._lock:
            self._check_open()
            self._current += 1
            round_done = not self._endpoints or self._current % len(self._endpoints) == 0
        return self._backoff if round_done else 0.0

    def request(self, command: Command, reply_type: type[R], *, timeout: float | None = None) -> R:
        """Send one command; return its reply, checked and built as ``reply_type``.

        Raises:
            InternalError: the reply does not have the shape of ``reply_type`` (the
                message names the field).
            CroupierError: the master refused the command, or no leader answered in time.
        """
        if type(command) is MapperEnd and reply_type is MapperEndReply and timeout is None:
            return cast(R, self.ends.end(command))
        body = self.call(command, timeout=timeout)
        return decode_reply(reply_type, body, type(command).__name__)

    def call(self, command: Command, *, timeout: float | None = None) -> dict[str, Any]:
        """Send one command; return the reply body as JSON values, unchecked.

        Raises:
            CroupierError: the master refused the command, or no leader answered in time.
        """
        msg_type, body = encode_command(command)
        last: CroupierError | None = None
        give_up = time.monotonic() + self._deadline
        attempt = 0
        while attempt < self._attempts or time.monotonic() < give_up:
            attempt += 1
            try:
                client = self._pick(resolve=last is not None)
                return client.call(msg_type, body, timeout=timeout or self._timeout).body
            except NotLeader as exc:
                last = exc
                pause = self._redirected(exc.leader)
            except (RequestTimeout, Unavailable) as exc:
                last = exc
                pause = self._failed()
            if pause:
                time.sleep(pause)
        assert last is not None
        log.warning("no master answered %s: %s", type(command).__name__, last)
        raise last

    def close(self) -> None:
        """Close the RPC clients and the lookup; a call in another thread ends with ``Unavailable``."""
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()  # waits for a request in flight on it
        if self._lookup is not None:
            self._lookup.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
