"""Wiring for one member of a master ensemble replicated through ZooKeeper (DESIGN §5).

A ``KazooClient``, a ``HotStandby`` (the follower's folded state), a
``MasterFront`` (RPC server, ticker, the actor while leading) and the
``Leadership`` recipe that moves this member between follower and leader
(``croupier.ha.leadership``; its decisions are ``croupier.ha.roles``'s).

Usage::

    with HaMasterService("tcp://127.0.0.1:9097", "zk://127.0.0.1:2181/croupier") as m:
        ...
"""

from __future__ import annotations

import logging
import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Self

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from croupier.actors.master_front import MasterFront
from croupier.core.commands import Command, Status
from croupier.core.config import MasterConfig
from croupier.core.enums import MasterRole
from croupier.core.errors import Unavailable
from croupier.core.urls import parse_master_url
from croupier.ha.leadership import Leadership
from croupier.ha.standby import HotStandby
from croupier.ha.timedlog import TimedLog
from croupier.ha.zklog import ZooKeeperEventLog
from croupier.ops.http import HttpEndpoint, start_master_http
from croupier.ops.metrics import MasterMetrics
from croupier.services._lifecycle import Service, raise_fd_limit
from croupier.transports.curve import CurveServer
from croupier.transports.secret import ClusterSecret

__all__ = ["HaMasterService"]

log = logging.getLogger(__name__)


class HaMasterService(Service):
    """Parameters:
    listen: the RPC bind endpoint (``tcp://HOST:PORT``; port 0 = any free port).
    zk_url: ``zk://h1:p1,h2:p2/root``.
    config: timeouts and intervals (``takeover_grace`` applies after every takeover).
    session_timeout: the ZooKeeper session timeout, seconds.
    curve: serve CURVE with this key pair, and talk CURVE to the workers (``--curve``).
    secret: the cluster secret (PROTOCOL §2.1); None (library use) accepts every request.
    http: ``HOST:PORT`` of the HTTP endpoint (port 0 = any free port; None = none). Each
        member publishes its HTTP URL in the ephemeral znode ``<root>/http/<quoted RPC URL>``
        so that a follower's ``/api/v1`` redirects to the leader's.
    """

    def __init__(
        self,
        listen: str,
        zk_url: str,
        *,
        config: MasterConfig | None = None,
        session_timeout: float = 4.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        curve: CurveServer | None = None,
        secret: ClusterSecret | None = None,
        http: str | None = None,
    ) -> None:
        parsed = parse_master_url(zk_url)
        self.metrics = MasterMetrics()
        self._http_listen = http
        self.http: HttpEndpoint | None = None
        if parsed.kind != "zk":
            raise ValueError(f"{zk_url}: --ha needs a zk://hosts/root URL")
        self.config = config or MasterConfig()
        self.root = parsed.root
        self._hosts = ",".join(parsed.endpoints)
        self._session_timeout = session_timeout
        self._front = MasterFront(
            listen,
            name="ha-master",
            config=self.config,
            clock=clock,
            rng=rng,
            when_idle=self._follower_answer,
            ensemble=self._ensemble,
            curve=curve,
            secret=secret,
            # every member of the ensemble: the same ZooKeeper hosts and root
            identity=f"zk:{','.join(sorted(parsed.endpoints))}/{parsed.root.strip('/')}",
        )
        self._zk: Any = None
        self._standby: HotStandby | None = None
        self._leadership: Leadership | None = None
        self._front.watch = self.metrics.watch
        self.metrics.collect(self._metrics_state)

    @property
    def url(self) -> str:
        return self._front.url

    @property
    def role(self) -> MasterRole:
        return self._leadership.role if self._leadership is not None else MasterRole.FOLLOWER

    @property
    def term(self) -> int:
        return self._leadership.term if self._leadership is not None else 0

    @property
    def leader_url(self) -> str:
        return self._leadership.leader_url if self._leadership is not None else ""

    def start(self) -> Self:
        try:
            raise_fd_limit()  # one descriptor per client connection, as in MasterService
            self._zk = KazooClient(
                hosts=self._hosts,
                timeout=self._session_timeout,
                connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
                command_retry=KazooRetry(max_tries=5, max_delay=1.0),
            )
            try:
                self._zk.start(timeout=30)
            except self._zk.handler.timeout_exception as exc:
                raise Unavailable(f"cannot reach ZooKeeper at {self._hosts} in 30 s") from exc
            # Fold the log before binding: one that cannot be replayed stops the start here,
            # before the URL is printed (the embedded master's LogCorrupted stop).
            self._standby = HotStandby(ZooKeeperEventLog(self._zk, self.root, writer=False), load=False)
            self._standby.load()
            self._front.start()
            self._start_http()  # before leading: the leader's STATUS names its HTTP URL
            self._leadership = Leadership(
                self._zk,
                self.root,
                self.url,
                self._front,
                self._standby,
                writer_wait=self._session_timeout * 3 + 5,
                wrap_log=lambda writer: TimedLog(
                    writer, self.metrics.appended
                ),  # appends to ZooKeeper, timed
            ).start()
        except BaseException:
            self.stop()
            raise
        log.info("master %s joined the ensemble at %s%s", self.url, self._hosts, self.root)
        return self

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()
            self.http = None
        if self._leadership is not None:
            self._leadership.stop()
        self._front.stop()
        if self._standby is not None:
            self._standby.close()
            self._standby = None
        if self._zk is not None:
            try:
                self._zk.stop()
            finally:
                self._zk.close()
            self._zk = None

    def _start_http(self) -> None:
        self.http = start_master_http(self._http_listen, self.metrics, self._front, self._leader_http)
        if self.http is not None:
            self._front.http_url = self.http.url
            self._zk.create(self._http_node(self.url), self.http.url.encode(), ephemeral=True, makepath=True)

    def _http_node(self, rpc_url: str) -> str:
        return f"{self.root}/http/{urllib.parse.quote(rpc_url, safe='')}"

    def _leader_http(self) -> str | None:
        """The leader's HTTP URL, from its znode (None: no leader, or it has no HTTP endpoint)."""
        leader, zk = self.leader_url, self._zk
        if not leader or leader == self.url or zk is None:
            return None
        try:
            data, _ = zk.get(self._http_node(leader))
        except Exception:  # NoNodeError, or ZooKeeper unreachable
            return None
        return bytes(data).decode() or None

    def _metrics_state(self) -> dict[str, Any]:
        """STATUS while leading; a follower's role and term only."""
        status = self._front.status()
        return status or {"master": {"role": str(self.role)}, "term": self.term}

    def _ensemble(self) -> dict[str, Any]:
        assert self._leadership is not None
        return self._leadership.describe()

    def _follower_answer(self, command: Command) -> dict[str, Any]:
        # on the RPC server thread, while this member does not lead
        if self._leadership is None or self._standby is None:
            raise Unavailable("the master is starting")
        if isinstance(command, Status):
            return self._standby.status(self._leadership.describe())
        raise self._leadership.refusal()
