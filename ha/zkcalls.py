"""``ZkCalls``: the ZooKeeper calls of one event log (``croupier.ha.zklog``), made safe to wait on.

Every call goes through a ``KazooRetry`` that does *not* survive session expiry and waits at
most ``op_timeout`` for each reply (kazoo would wait forever while the ensemble is
unreachable); what still fails becomes ``Unavailable``, naming the log's root. Many reads or
creates are pipelined, a window at a time.

Usage::

    calls = ZkCalls(zk, "/croupier", KazooRetry(max_tries=8, ignore_expire=False), op_timeout=10.0)
    children = calls.call("list /croupier/log", zk.get_children_async, "/croupier/log")
    datas = calls.fetch_many([f"/croupier/log/{c}" for c in children], "read the log")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
)
from kazoo.retry import KazooRetry

from croupier.core.errors import Unavailable
from croupier.ha.zkfence import Fenced

__all__ = ["FETCH_WINDOW", "ZkCalls"]

# How many reads (or creates) are in flight at once when fetching many znodes.
FETCH_WINDOW = 32


class ZkCalls:
    """ZooKeeper calls for the log under ``root``.

    Parameters:
        zk: a started ``KazooClient`` (the caller owns it).
        root: the log's root path, for error messages.
        retry: the policy for every call; it must not ignore session expiry.
        op_timeout: the longest wait for one ZooKeeper reply.

    State:
        timeout_error: the exception kazoo's handler raises when a wait times out.
    """

    def __init__(self, zk: Any, root: str, retry: KazooRetry, op_timeout: float) -> None:
        self.zk = zk
        self.root = root
        self.retry = retry
        self.op_timeout = op_timeout
        self.timeout_error: type[BaseException] = zk.handler.timeout_exception

    def unavailable(self, what: str, exc: BaseException) -> Unavailable:
        """The error for a call that failed: ``cannot <what> (<the kazoo error>)``."""
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Unavailable(
            f"ZooKeeper event log {self.root or '/'}: cannot {what} ({reason})", {"root": self.root}
        )

    def call(
        self, what: str, fn: Callable[..., Any], *args: Any, expected: tuple[type[BaseException], ...] = ()
    ) -> Any:
        """``fn(*args)`` (a kazoo ``*_async`` method) through the retry policy, waiting at most
        ``op_timeout`` per attempt; kazoo errors other than ``expected`` become ``Unavailable``."""

        def once() -> Any:
            return fn(*args).get(timeout=self.op_timeout)

        try:
            return self.retry.copy()(once)
        except expected:
            raise
        except (KazooException, self.timeout_error) as exc:
            raise self.unavailable(what, exc) from exc

    def fetch_many(self, paths: Sequence[str], what: str) -> list[bytes | None]:
        """The data of every path (``None`` where the znode is gone), reads pipelined."""
        out: list[bytes | None] = []
        for start in range(0, len(paths), FETCH_WINDOW):
            window = paths[start : start + FETCH_WINDOW]
            pending = [self.zk.get_async(p) for p in window]
            for path, result in zip(window, pending, strict=True):
                try:
                    data, _stat = result.get(timeout=self.op_timeout)
                except NoNodeError:
                    out.append(None)
                    continue
                except (ConnectionLoss, OperationTimeoutError):
                    # one lost reply: fetch that znode again, with the retry policy
                    try:
                        data, _stat = self.call(what, self.zk.get_async, path, expected=(NoNodeError,))
                    except NoNodeError:
                        out.append(None)
                        continue
                except (KazooException, self.timeout_error) as exc:
                    raise self.unavailable(what, exc) from exc
                out.append(bytes(data))
        return out

    def create_idempotent(self, path: str, value: bytes) -> None:
        """Create ``path``, a path unique to its writer: NodeExists after a retry means our create
        landed."""
        with contextlib.suppress(NodeExistsError):
            self.call(f"create {path}", self.zk.create_async, path, value, expected=(NodeExistsError,))

    def create_many(self, znodes: Sequence[tuple[str, bytes]]) -> None:
        """Create every ``(path, value)``, pipelined; each path unique to its writer (as above)."""
        for start in range(0, len(znodes), FETCH_WINDOW):
            pending = znodes[start : start + FETCH_WINDOW]
            results = [self.zk.create_async(path, value) for path, value in pending]
            for (path, value), result in zip(pending, results, strict=True):
                try:
                    result.get(timeout=self.op_timeout)
                except NodeExistsError:
                    pass
                except (ConnectionLoss, OperationTimeoutError):
                    self.create_idempotent(path, value)
                except (KazooException, self.timeout_error) as exc:
                    raise self.unavailable(f"write {path}", exc) from exc

    def delete_tree(self, path: str) -> None:
        """Delete ``path`` and its children (one level, as snapshot directories are)."""
        try:
            chunks = self.call(f"list {path}", self.zk.get_children_async, path, expected=(NoNodeError,))
        except NoNodeError:
            return
        pending = [self.zk.delete_async(f"{path}/{c}") for c in chunks]
        for result in pending:
            with contextlib.suppress(NoNodeError):
                result.get(timeout=self.op_timeout)
        with contextlib.suppress(NoNodeError):
            self.call(f"delete {path}", self.zk.delete_async, path, expected=(NoNodeError,))

    def commit(self, tx: Any, labels: list[str], what: str) -> list[Any]:
        """Commit ``tx`` once; a failed check (the first ``len(labels)`` operations, see
        ``zkfence.add_checks``) raises ``Fenced``. Kazoo's ``commit`` does not raise for failed
        operations: the result list holds the errors."""
        results: list[Any] = tx.commit_async().get(timeout=self.op_timeout)
        for i, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                if i < len(labels):
                    raise Fenced(
                        f"this master was deposed: {labels[i]} ({type(result).__name__});"
                        f" {what} was not applied",
                        {"root": self.root},
                    )
                raise Unavailable(
                    f"ZooKeeper event log {self.root}: {what} failed ({type(result).__name__}: {result})",
                    {"root": self.root},
                )
        return results
