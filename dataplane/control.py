"""``ControlHandler``: the control port: RESERVE, COMMIT_FILES, DESTROY, WORKER_INFO and PING.

RESERVE records the locations the master placed here (``Reservations``), on the control
server thread. DESTROY, and ``drop_orphan`` for a shuffle the master no longer knows,
forget the shuffle's (or app's) locations at once, on the control server thread,
then waits for their actors to have dropped them before it removes the files: no flush
of the shuffle starts after that, so none recreates a removed file. The wait and the
removal run on a one-thread pool owned here (``close`` ends it), and the reply is sent
from there, so a slow actor never holds up the other control requests.

An app's RESERVE, COMMIT_FILES and DESTROY stay in order: while the pool holds work of an
app (a destroy waiting for its actors), a later one of these for the same app runs on the
pool behind it instead of on the server thread. A new registration of an app id that
reserves during the earlier registration's DESTROY is therefore answered only once that
removal is done, and nothing it writes can be removed by it.

State: the destroy pool, and per app how much of its work the pool holds. WORKER_INFO is
answered with ``info()``, PING with the clock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykka

from croupier.core.codec import from_json
from croupier.core.dataplane import (
    CommitFiles,
    Destroy,
    DestroyReply,
    Reserve,
    ReserveReply,
    WorkerInfoReply,
    encode_reply,
)
from croupier.core.errors import CroupierError, InternalError
from croupier.core.wire import MsgType
from croupier.dataplane.commit import commit_files
from croupier.dataplane.locations import Locations
from croupier.dataplane.offload import Offloader
from croupier.dataplane.pushed import PushedBytes
from croupier.dataplane.reservations import Reservations
from croupier.dataplane.split import SplitPolicy
from croupier.storage.memory_tier import MemoryTier
from croupier.storage.store import PartitionStore
from croupier.transports.log_context import key_fields
from croupier.transports.rpc import Request, Responder
from croupier.transports.secret import AppTags

__all__ = ["ControlHandler"]

log = logging.getLogger(__name__)


class ControlHandler:
    """Parameters:
    locations: the live locations.
    reservations: the locations placed here.
    store: the committed files.
    incarnation: this worker's, reported in COMMIT_FILES replies.
    info: what WORKER_INFO answers (PING answers only the worker's clock).
    drop_timeout: how long DESTROY waits for each actor to drop its locations.
    pushed: the bytes in flight per shuffle, forgotten at COMMIT_FILES and DESTROY.
    split: the locations' sizes for the split threshold, forgotten at COMMIT_FILES and DESTROY.
    tier: the memory tier: filled at COMMIT_FILES, evicted with the files.
    app_tags: the key tag of each app's registration (PROTOCOL §2.1), learnt from RESERVE and
        COMMIT_FILES, forgotten at the app's DESTROY; the verifier and the push path read it.
    offloader: uploads each copy committed here to the object store (issue 26); DESTROY
        deletes the shuffle's objects there too. None: no object store.
    """

    def __init__(
        self,
        locations: Locations,
        reservations: Reservations,
        store: PartitionStore,
        incarnation: str,
        info: Callable[[], WorkerInfoReply],
        *,
        drop_timeout: float = 10.0,
        pushed: PushedBytes | None = None,
        split: SplitPolicy | None = None,
        tier: MemoryTier | None = None,
        app_tags: AppTags | None = None,
        offloader: Offloader | None = None,
    ) -> None:
        self._offloader = offloader
        self._app_tags = app_tags if app_tags is not None else AppTags()
        self._split = split
        self._tier = tier
        self._pushed = pushed or PushedBytes()
        self._locations = locations
        self._reservations = reservations
        self._store = store
        self._incarnation = incarnation
        self._info = info
        self._drop_timeout = drop_timeout
        self._destroys = ThreadPoolExecutor(1, thread_name_prefix="worker-destroy")
        self._queued: dict[str, int] = {}  # app id -> its tasks on the pool, queued or running
        self._queued_lock = threading.Lock()

    def close(self) -> None:
        """Finish the destroys already started or queued."""
        self._destroys.shutdown(wait=True)
        if self._offloader is not None:
            self._offloader.close()

    def on_control(self, request: Request, responder: Responder) -> None:
        """Dispatch one control request; every one is answered, DESTROY later."""
        if request.msg_type == MsgType.RESERVE:
            reserve = from_json(Reserve, request.body)
            reserve.validate()
            self._in_order(reserve.app_id, self._reserve, reserve, responder)
        elif request.msg_type == MsgType.COMMIT_FILES:
            cmd = from_json(CommitFiles, request.body)
            cmd.validate()
            self._in_order(cmd.app_id, self._commit, cmd, responder)
        elif request.msg_type == MsgType.DESTROY:
            destroy = from_json(Destroy, request.body)
            destroy.validate()
            self._in_order(destroy.app_id, self._destroy, destroy, responder)
        elif request.msg_type == MsgType.WORKER_INFO:
            responder.ok(encode_reply(self._info()))
        else:  # PING is open: nothing about the worker, only its clock (PROTOCOL §2.1, §5.2)
            responder.ok({"pong": True, "time_us": time.time_ns() // 1000})

    def _in_order(
        self, app_id: str, handle: Callable[[Any, Responder], None], cmd: Any, responder: Responder
    ) -> None:
        """``handle(cmd, responder)`` here, or on the pool behind the app's work queued there."""
        with self._queued_lock:
            busy = app_id in self._queued
        if not busy:
            handle(cmd, responder)
            return

        def deferred() -> None:
            try:
                handle(cmd, responder)
            except CroupierError as exc:
                responder.error(exc)
            except Exception as exc:  # the pool would swallow it, and the master would wait in vain
                log.exception("%s of %s failed", type(cmd).__name__, app_id)
                responder.error(InternalError(f"{type(exc).__name__} handling {type(cmd).__name__}"))

        log.info("%s of app %s waits for the app's destroy", type(cmd).__name__, app_id)
        self._submit(app_id, deferred)

    def _submit(self, app_id: str, task: Callable[[], None]) -> None:
        """Run ``task`` on the pool, counted as the app's work until it ends."""
        with self._queued_lock:
            self._queued[app_id] = self._queued.get(app_id, 0) + 1

        def run() -> None:
            try:
                task()
            finally:
                with self._queued_lock:
                    left = self._queued[app_id] - 1
                    if left:
                        self._queued[app_id] = left
                    else:
                        del self._queued[app_id]

        self._destroys.submit(run)

    def _reserve(self, reserve: Reserve, responder: Responder) -> None:
        self._learn_tag(reserve.app_id, reserve.key_tag)
        held = self._reservations.reserve(reserve)
        if reserve.revived:  # a revive before the commit, or a rerun's new epoch after it
            where = [(p, e) for p, e, *_ in reserve.revived]
            self._locations.reopen(reserve.app_id, reserve.shuffle_id, where)
        responder.ok(encode_reply(ReserveReply(held)))

    def _commit(self, cmd: CommitFiles, responder: Responder) -> None:
        self._learn_tag(cmd.app_id, cmd.key_tag)
        # the tag in force, for a restart (PROTOCOL §5.4)
        self._store.save_key_tag(cmd.app_id, self._app_tags.get(cmd.app_id) or "")
        self._forget(cmd.app_id, cmd.shuffle_id)
        commit_files(
            cmd,
            locations=self._locations,
            store=self._store,
            incarnation=self._incarnation,
            responder=responder,
            tier=self._tier,
            on_committed=None if self._offloader is None else self._offloader.submit,
        )

    def _destroy(self, destroy: Destroy, responder: Responder) -> None:
        self._forget(destroy.app_id, destroy.shuffle_id)
        self._reservations.forget(destroy.app_id, destroy.shuffle_id)
        if destroy.shuffle_id is None:  # the app is gone: a new registration has a new key
            self._app_tags.drop(destroy.app_id)
        dropped = self._locations.remove(destroy.app_id, destroy.shuffle_id)
        self._submit(destroy.app_id, lambda: self._answer_destroy(destroy, dropped, responder))

    def _learn_tag(self, app_id: str, tag: str | None) -> None:
        """The app's current registration has ``tag`` (PROTOCOL §2.1). Another tag known here
        (a DESTROY missed, or a tag kept on disk from before a restart) belongs to an earlier
        registration of the id, which is over: what is held of it is destroyed first, so that
        its files are never read with the new key.

        Raises:
            CroupierError: those files cannot be removed (the tag is not changed then).
        """
        known = self._app_tags.get(app_id)
        if known and not tag:
            # no tag said: only an app logged before tags has none, and a registration that
            # came after a tagged one always has one, so this is not a new registration
            return
        if known is not None and known != (tag or ""):
            log.warning("app %s has a new registration: destroying what is held of the earlier one", app_id)
            self._forget(app_id, None)
            self._reservations.forget(app_id, None)
            dropped = self._locations.remove(app_id, None)
            self._remove_files(Destroy(app_id, None), dropped)
        self._app_tags.set(app_id, tag)

    def drop_orphan(self, app_id: str, shuffle_id: int) -> None:
        """Destroy a shuffle the master no longer knows (its DESTROY never came), as DESTROY does.

        Its reservations must be forgotten already (``Reservations.forget_unless_since``).
        """
        self._forget(app_id, shuffle_id)
        dropped = self._locations.remove(app_id, shuffle_id)
        self._submit(app_id, lambda: self._remove_orphan(Destroy(app_id, shuffle_id), dropped))

    def _forget(self, app_id: str, shuffle_id: int | None) -> None:
        self._pushed.drop(app_id, shuffle_id)
        if self._split is not None:
            self._split.forget(app_id, shuffle_id)

    def _answer_destroy(
        self, destroy: Destroy, dropped: list[pykka.Future[Any]], responder: Responder
    ) -> None:
        try:
            removed = self._remove_files(destroy, dropped)
        except CroupierError as exc:
            responder.error(exc)
            return
        except Exception as exc:  # the pool would swallow it, and the master would wait in vain
            log.exception(
                "destroying %s/%s failed", destroy.app_id, destroy.shuffle_id, extra=key_fields(destroy)
            )
            responder.error(InternalError(f"{type(exc).__name__} destroying the files"))
            return
        responder.ok(encode_reply(DestroyReply(removed)))

    def _remove_orphan(self, destroy: Destroy, dropped: list[pykka.Future[Any]]) -> None:
        try:
            removed = self._remove_files(destroy, dropped)
        except Exception:  # logged; the files stay until the sweep after the next start
            log.exception(
                "removing orphan %s/%s failed", destroy.app_id, destroy.shuffle_id, extra=key_fields(destroy)
            )
            return
        log.warning(
            "removed %d locations of %s/%s: the master no longer knows it",
            removed,
            destroy.app_id,
            destroy.shuffle_id,
            extra=key_fields(destroy),
        )

    def _remove_files(self, destroy: Destroy, dropped: list[pykka.Future[Any]]) -> int:
        """Remove the files once every actor has dropped the locations (or ``drop_timeout`` passed)."""
        for future in dropped:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                future.get(timeout=self._drop_timeout)
        if self._tier is not None:  # first: its memory goes even if removing the files fails
            self._tier.evict(destroy.app_id, destroy.shuffle_id)
        removed = self._store.remove(destroy.app_id, destroy.shuffle_id)
        if self._offloader is not None:
            self._offloader.delete(destroy.app_id, destroy.shuffle_id)
        if self._tier is not None:  # and what a commit took meanwhile
            self._tier.evict(destroy.app_id, destroy.shuffle_id)
        log.info(
            "destroyed %s/%s: %d locations",
            *(destroy.app_id, destroy.shuffle_id, removed),
            extra=key_fields(destroy),
        )
        return removed
