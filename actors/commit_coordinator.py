"""``CommitCoordinator``: the master's side effects on workers: CommitFiles and Destroy.

With an object store (``--object-store``) it also owns the master's ``ObjectJanitor``: a
``destroy`` deletes the objects too, even when no worker is left, and the master actor's
liveness ticks drive the janitor's orphan sweep.

State it owns:
    in_progress   shuffles whose commit is running (a second request is ignored)
    an ``AsyncRpcClient`` for worker RPCs, so the master actor never blocks on a worker

When every map of a shuffle has ended, the master actor hands over a
``CommitPlan``: every copy of every location with the worker incarnation it was
placed on, and each map's winning attempt with the partitions it declared. The
coordinator sends ``COMMIT_FILES`` to every worker in parallel (with retries),
lets ``croupier.core.commit_verdict.judge`` decide which copies failed and which
declared seals no surviving copy holds, and submits ``ReportCommit`` to the
master, which logs ``ShuffleCommitted``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from croupier.actors.object_janitor import ObjectJanitor
from croupier.core.codec import from_json, to_json
from croupier.core.commands import Command, ReportCommit
from croupier.core.commit_verdict import Copy, judge
from croupier.core.dataplane import CommitFiles, CommitFilesReply, Destroy, DestroyReply
from croupier.core.errors import BadRequest, CroupierError
from croupier.core.state import Winner
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient
from croupier.transports.log_context import key_fields, object_fields
from croupier.transports.rpc import Reply

__all__ = ["CommitCoordinator", "CommitPlan", "Copy"]

log = logging.getLogger(__name__)

R = TypeVar("R", CommitFilesReply, DestroyReply)


@dataclass(frozen=True, slots=True)
class CommitPlan:
    app_id: str
    shuffle_id: int
    num_partitions: int
    copies: tuple[Copy, ...]
    workers: dict[str, str]  # worker -> control URL, for workers that are not lost
    winners: dict[int, Winner] = field(default_factory=dict)  # map -> (attempt, touched, bitmap)
    key_tag: str | None = None  # the app's registration (PROTOCOL §2.1), for COMMIT_FILES


class CommitCoordinator:
    """Parameters:
    submit: hands a command to the master actor (non-blocking).
    timeout: per-try timeout of a worker RPC (a commit flushes what is buffered).
    tries: tries per worker; a worker the master declares lost gets no more tries.
    curve: talk CURVE to the workers, with this server key.
    signer: the member signer of ``COMMIT_FILES`` and ``DESTROY`` (PROTOCOL §2.1), and of
        the ``RESERVE`` sender the master actor builds beside it; None = unsigned.
    janitor: the master's deletions in the object store (None: no object store); stopped
        with the coordinator.

    All worker RPCs go through one ``AsyncRpcClient``; its callbacks run on its
    thread, so nothing here blocks, and ``stop`` ends everything at once.
    """

    def __init__(
        self,
        submit: Callable[[Command], None],
        *,
        timeout: float = 20.0,
        tries: int = 3,
        curve: CurveClient | None = None,
        signer: Signer | None = None,
        janitor: ObjectJanitor | None = None,
    ) -> None:
        self.janitor = janitor
        self.signer = signer
        self.curve = curve
        self._submit = submit
        self._timeout = timeout
        self._tries = tries
        self._client = AsyncRpcClient(timeout=timeout, name="master-commit", curve=curve, signer=signer)
        self._client.start()
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()
        self._lost: set[str] = set()
        self._stopped = False

    def set_lost(self, worker: str, lost: bool) -> None:
        """The master declared ``worker`` lost (or it registered again): retries to it stop."""
        with self._lock:
            if lost:
                self._lost.add(worker)
            else:
                self._lost.discard(worker)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._client.stop()
        if self.janitor is not None:
            self.janitor.close()

    def apps_loaded(self, apps: Iterable[str]) -> None:
        """The master's live apps, once its log is loaded (the janitor sweeps only after it)."""
        if self.janitor is not None:
            self.janitor.reset(apps)

    def app_registered(self, app_id: str) -> None:
        if self.janitor is not None:
            self.janitor.registered(app_id)

    def tick(self, now: float) -> None:
        """The master's liveness tick (after its take-over grace): the janitor's orphan sweep."""
        if self.janitor is not None:
            self.janitor.tick(now)

    def commit(self, plan: CommitPlan) -> None:
        """Start committing ``plan`` (returns at once; a running commit of the same shuffle wins)."""
        key = (plan.app_id, plan.shuffle_id)
        with self._lock:
            if self._stopped or key in self._in_progress:
                return
            self._in_progress.add(key)
        replies: dict[str, CommitFilesReply | None] = {}
        remaining = [len(plan.workers)]

        def finished(worker: str, body: CommitFilesReply | None) -> None:
            with self._lock:
                replies[worker] = body
                remaining[0] -= 1
                done = remaining[0] == 0
                if done:
                    self._in_progress.discard(key)
                stopped = self._stopped
            if done and not stopped:
                self._submit(self._report(plan, replies))

        if not plan.workers:
            finished("", None)
            return
        for worker, url in plan.workers.items():
            self._call(
                worker,
                url,
                CommitFiles(plan.app_id, plan.shuffle_id, plan.key_tag),
                CommitFilesReply,
                self._tries,
                finished,
            )

    def destroy(self, app_id: str, shuffle_id: int | None, workers: dict[str, str]) -> None:
        """Ask every worker to delete a shuffle's (or an app's) files, and delete its objects
        (the janitor, with an object store); best effort."""
        if self.janitor is not None:
            self.janitor.delete(app_id, shuffle_id)

        def destroyed(worker: str, reply: DestroyReply | None) -> None:
            if reply is not None:
                log.debug("worker %s removed %d files of %s/%s", worker, reply.removed, app_id, shuffle_id)

        for worker, url in workers.items():
            self._call(worker, url, Destroy(app_id, shuffle_id), DestroyReply, 2, destroyed)

    def _call(
        self,
        worker: str,
        url: str,
        body: CommitFiles | Destroy,
        reply_type: type[R],
        tries: int,
        done: Callable[[str, R | None], None],
    ) -> None:
        """Send ``body`` to ``worker`` with up to ``tries`` tries; ``done`` gets its decoded reply,
        or None when every try failed or the reply was malformed."""

        def callback(reply: Reply | None, error: CroupierError | None) -> None:
            if reply is not None:
                try:
                    decoded = from_json(reply_type, reply.body)
                except BadRequest as exc:
                    log.error(
                        "worker %s (%s) sent a malformed %s reply: %s",
                        *(worker, url, type(body).__name__, exc),
                        extra=object_fields(body),
                    )
                    done(worker, None)
                    return
                done(worker, decoded)
                return
            assert error is not None
            log.warning(
                "%s to worker %s (%s) failed (%d tries left): %s",
                type(body).__name__,
                worker,
                url,
                tries - 1,
                error,
                extra=object_fields(body),
            )
            with self._lock:
                stopped = self._stopped or worker in self._lost
            if tries > 1 and error.retriable and not stopped:
                self._call(worker, url, body, reply_type, tries - 1, done)
            else:
                done(worker, None)

        self._client.send(url, int(body.TYPE), to_json(body), (), callback, timeout=self._timeout)

    @staticmethod
    def _report(plan: CommitPlan, replies: dict[str, CommitFilesReply | None]) -> ReportCommit:
        verdict = judge(plan.copies, replies, plan.winners, plan.num_partitions)
        if verdict.failed:
            log.warning(
                "shuffle %s/%d: %d copies failed at commit",
                *(plan.app_id, plan.shuffle_id, len(verdict.failed)),
                extra=key_fields(plan),
            )
        for p, lo, hi in verdict.lost_maps:
            log.error(
                "shuffle %s/%d partition %d: no surviving copy holds the seals of maps %d..%d",
                *(plan.app_id, plan.shuffle_id, p, lo, hi - 1),
                extra=key_fields(plan),
            )
        return ReportCommit(
            plan.app_id,
            plan.shuffle_id,
            verdict.failed,
            verdict.total_bytes,
            verdict.total_batches,
            verdict.lost_maps,
        )
