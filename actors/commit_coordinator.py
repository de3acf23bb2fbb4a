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

Before it names data lost, it asks the workers that did not answer: when the verdict
has maps with no surviving seal and some copy of those partitions is on a worker that
gave no reply (the master declared it lost, or every try timed out), each such worker
gets one more ``COMMIT_FILES`` (one try) and the verdict is judged again with its
answer. A worker declared lost has only been silent past the worker timeout (an
overloaded machine, a long pause); the judge's incarnation check tells whether its
memory survived. A dead worker costs one RPC timeout, and only when data would
otherwise be lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from croupier.actors.object_janitor import ObjectJanitor
from croupier.core.codec import from_json, to_json
from croupier.core.commands import Command, ReportCommit
from croupier.core.commit_verdict import Copy, judge
from croupier.core.dataplane import CommitFiles, CommitFilesReply, Destroy, DestroyReply
from croupier.core.enums import CopyRole, WorkerStatus
from croupier.core.errors import BadRequest, CroupierError
from croupier.core.state import MasterState, Winner
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient
from croupier.transports.log_context import key_fields, object_fields
from croupier.transports.rpc import Reply

__all__ = ["CommitCoordinator", "CommitPlan", "Copy", "commit_plan", "control_urls"]

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
    suspects: dict[str, str] = field(default_factory=dict)  # lost worker -> its last control URL


def control_urls(state: MasterState) -> dict[str, str]:
    """worker -> control URL, of the workers that are not lost."""
    return {
        w.worker_id: f"tcp://{w.host}:{w.control_port}"
        for w in state.workers.values()
        if w.status != WorkerStatus.LOST
    }


def commit_plan(state: MasterState, app_id: str, shuffle_id: int) -> CommitPlan | None:
    """The plan of a shuffle whose maps have all ended (None: no such shuffle)."""
    info = state.shuffle(app_id, shuffle_id)
    if info is None:
        return None
    copies = []
    # the incarnations each copy was placed on; every epoch-0 location shares one tuple
    by_id: dict[int, dict[str, str]] = {}
    for p in range(info.num_partitions):
        for loc in info.locations(p):
            placed = by_id.get(id(loc.incarnations))
            if placed is None:
                placed = by_id[id(loc.incarnations)] = dict(loc.incarnations)
            # a location committed before a rerun is judged by its files, not its worker's memory
            seen = {} if info.was_committed(p, loc.epoch) else placed
            copies.append(Copy(p, loc.epoch, loc.primary, CopyRole.PRIMARY, seen.get(loc.primary)))
            if loc.replica is not None:
                copies.append(Copy(p, loc.epoch, loc.replica, CopyRole.REPLICA, seen.get(loc.replica)))
    urls = control_urls(state)
    workers = {w: urls[w] for w in info.workers() if w in urls}
    # workers declared lost are asked too before their copies' data is named lost
    suspects = {
        w: f"tcp://{worker.host}:{worker.control_port}"
        for w in info.workers()
        if w not in urls and (worker := state.workers.get(w)) is not None
    }
    app = state.apps.get(app_id)
    tag = app.key_tag if app is not None and app.key_tag else None
    return CommitPlan(
        app_id, shuffle_id, info.num_partitions, tuple(copies), workers, dict(info.winners), tag, suspects
    )


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
        self._moved: dict[str, str] = {}  # worker -> the control URL it registered last
        self._stopped = False

    def set_lost(self, worker: str, lost: bool, url: str | None = None) -> None:
        """The master declared ``worker`` lost: retries to it stop. Or it registered again,
        at control ``url``: retries go there (a worker restarted on another port)."""
        with self._lock:
            if lost:
                self._lost.add(worker)
            else:
                self._lost.discard(worker)
                if url is not None:
                    self._moved[worker] = url

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
        self._ask(plan, plan.workers, self._tries, replies, lambda: self._second_chance(plan, replies))

    def _ask(
        self,
        plan: CommitPlan,
        workers: dict[str, str],
        tries: int,
        replies: dict[str, CommitFilesReply | None],
        then: Callable[[], None],
    ) -> None:
        """Send ``COMMIT_FILES`` to ``workers`` (``tries`` each); their replies go into
        ``replies`` and ``then`` runs once every one of them answered or gave up."""
        remaining = [len(workers)]

        def finished(worker: str, body: CommitFilesReply | None) -> None:
            with self._lock:
                if worker:
                    replies[worker] = body
                remaining[0] -= 1
                done = remaining[0] == 0
            if done:
                then()

        if not workers:
            finished("", None)
            return
        for worker, url in workers.items():
            body = CommitFiles(plan.app_id, plan.shuffle_id, plan.key_tag)
            self._call(worker, url, body, CommitFilesReply, tries, finished)

    def _second_chance(self, plan: CommitPlan, replies: dict[str, CommitFilesReply | None]) -> None:
        """Before data is named lost, ask once more the silent workers holding its copies."""
        verdict = judge(plan.copies, replies, plan.winners, plan.num_partitions)
        with self._lock:  # where each worker registered last
            urls = {**plan.suspects, **plan.workers, **self._moved}
        gone = {p for p, _, _ in verdict.lost_maps}
        silent = {
            c.worker: urls[c.worker]
            for c in plan.copies
            if c.partition in gone and replies.get(c.worker) is None and c.worker in urls
        }
        if not silent:
            self._finish(plan, replies)
            return
        log.warning(
            "shuffle %s/%d: partitions %s would be lost; asking the silent workers %s once more",
            *(plan.app_id, plan.shuffle_id, sorted(gone), sorted(silent)),
            extra=key_fields(plan),
        )
        self._ask(plan, silent, 1, replies, lambda: self._finish(plan, replies))

    def _finish(self, plan: CommitPlan, replies: dict[str, CommitFilesReply | None]) -> None:
        with self._lock:
            self._in_progress.discard((plan.app_id, plan.shuffle_id))
            stopped = self._stopped
        if not stopped:
            self._submit(self._report(plan, replies))

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
                now = self._moved.get(worker, url)
            if tries > 1 and error.retriable and not stopped:
                self._call(worker, now, body, reply_type, tries - 1, done)
            else:
                done(worker, None)

        self._client.send(url, int(body.TYPE), to_json(body), (), callback, timeout=self._timeout)

    @staticmethod
    def _report(plan: CommitPlan, replies: Mapping[str, CommitFilesReply | None]) -> ReportCommit:
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
            verdict.empty,
        )
