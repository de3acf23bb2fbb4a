"""``ZooKeeperLeaderLookup``: the master leader's URL, read from ``<root>/leader``.

The leader writes its address there when it wins the election (``croupier.core.leader_record``,
DESIGN §5); a ``MasterClient`` given a ``zk://`` URL asks this lookup where to send its
commands. It is the ``zk`` implementation of the ``croupier.leader_lookups`` entry point
(pyproject.toml): ``transports/`` declares the port and never imports ZooKeeper itself.

Usage::

    lookup = ZooKeeperLeaderLookup("zk://127.0.0.1:2181/croupier", timeout=5.0)
    url = lookup()         # "tcp://10.0.0.7:9097"; Unavailable while an election is under way
    lookup.close()
"""

from __future__ import annotations

import threading
from typing import Any

from croupier.core.errors import CroupierError, Unavailable
from croupier.core.leader_record import decode_leader
from croupier.core.urls import parse_master_url

__all__ = ["ZooKeeperLeaderLookup"]


class ZooKeeperLeaderLookup:
    """Reads ``<root>/leader`` of the ensemble a ``zk://hosts/root`` URL names (thread-safe).

    Parameters:
        url: ``zk://h1:2181[,h2:2181...]/root``.
        timeout: how long to wait for the ZooKeeper connection.

    State:
        _zk: a read-only ``KazooClient``, started on the first lookup and dropped after a
            failure (the next lookup starts a new one).
        _lock: serialises lookups and ``close``.

    Raises (constructor):
        ValueError: ``url`` is not a ``zk://`` URL.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parsed = parse_master_url(url)
        if parsed.kind != "zk":
            raise ValueError(f"{url!r} is not a zk:// URL")
        self.url = url
        self._hosts = ",".join(parsed.endpoints)
        self._root = parsed.root
        self._timeout = timeout
        self._zk: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """The leader's URL.

        Raises:
            Unavailable: no leader yet (an election is under way), or ZooKeeper failed.
        """
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError
        from kazoo.retry import KazooRetry

        with self._lock:
            try:
                if self._zk is None:
                    self._zk = KazooClient(
                        hosts=self._hosts,
                        timeout=10.0,
                        connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
                        read_only=True,
                    )
                    self._zk.start(timeout=self._timeout)
                data, _ = self._zk.get(f"{self._root}/leader")
                return decode_leader(data).url
            except NoNodeError:
                raise Unavailable(f"no leader in {self.url} yet (an election is under way)") from None
            except CroupierError:
                raise
            except ValueError as exc:
                raise Unavailable(f"cannot read the leader from {self.url}: {exc}") from exc
            except Exception as exc:  # kazoo timeouts and connection errors
                self._drop()
                raise Unavailable(f"cannot read the leader from {self.url}: {exc}") from exc

    def close(self) -> None:
        """Stop the ZooKeeper client. Idempotent."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
