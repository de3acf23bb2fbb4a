"""Wiring for one master: event log + ``MasterActor`` + RPC server + liveness ticker.

Usage::

    with MasterService("tcp://127.0.0.1:0", data_dir="/var/lib/croupier") as master:
        print(master.url)

``data_dir=None`` keeps the log in memory (tests only: nothing survives a restart).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from croupier.actors.commit_coordinator import CommitCoordinator
from croupier.actors.master_actor import MasterActor, ReplyFn, Submit, SubmitMany, Tick
from croupier.core.commands import COMMAND_TYPES, INTERNAL_TYPES, Command, decode_command
from croupier.core.config import MasterConfig
from croupier.core.errors import CroupierError, Unavailable
from croupier.ha.eventlog import EventLog, MemoryEventLog
from croupier.ha.filelog import FileEventLog
from croupier.services._lifecycle import Service
from croupier.transports.rpc import Request, Responder, RpcServer

__all__ = ["MasterService"]

log = logging.getLogger(__name__)


class MasterService(Service):
    """One master process's parts, started and stopped together.

    Parameters:
        listen: a ZeroMQ bind endpoint (``tcp://HOST:PORT``; port 0 = any free port).
        data_dir: where the file log and snapshots live; None = in memory.
        config: timeouts and intervals.
        clock: wall-clock seconds; tests pass a fake one and call ``tick()``.
        rng: randomness for placement and ids.
        event_log: use this log instead of one in ``data_dir``.
    """

    def __init__(
        self,
        listen: str = "tcp://127.0.0.1:9097",
        data_dir: str | os.PathLike[str] | None = None,
        *,
        config: MasterConfig | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        event_log: EventLog | None = None,
    ) -> None:
        self.config = config or MasterConfig()
        self._listen = listen
        self._clock = clock
        self._rng = rng
        self._data_dir = data_dir
        self._given_log = event_log
        self._log: EventLog | None = None
        self._actor: Any = None
        self._server: RpcServer | None = None
        self._ticker: threading.Thread | None = None
        self._coordinator: CommitCoordinator | None = None
        self._burst: list[tuple[Command, ReplyFn | None]] = []
        self._stop_ticker = threading.Event()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return self._server.url

    def start(self) -> Self:
        try:
            if self._given_log is not None:
                self._log = self._given_log
            elif self._data_dir is not None:
                self._log = FileEventLog(self._data_dir)
            else:
                self._log = MemoryEventLog()
            self._server = RpcServer(
                self._listen,
                self._on_request,
                name="master",
                allowed_types=[t for t in COMMAND_TYPES if t not in INTERNAL_TYPES],
                on_batch_end=self._flush,
            )
            # bind first so that the URL (port 0) is known for status replies
            self._server.start()
            info = {"role": "standalone", "url": self._server.url, "log": type(self._log).__name__}
            self._coordinator = CommitCoordinator(self._submit_internal)
            self._actor = MasterActor.start(
                self._log, self.config, self._clock, rng=self._rng, info=info, coordinator=self._coordinator
            )
            if self.config.sweep_interval > 0:
                self._ticker = threading.Thread(target=self._tick_loop, name="master-ticker", daemon=True)
                self._ticker.start()
        except BaseException:
            self.stop()
            raise
        log.info("master serving on %s (log: %s)", self._server.url, self._data_dir or "memory")
        return self

    def stop(self) -> None:
        """Stop serving, commit what is queued, close the log. Idempotent."""
        self._stop_ticker.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self._server is not None:
            self._server.stop()
        if self._coordinator is not None:
            self._coordinator.stop()
            self._coordinator = None
        if self._actor is not None:
            self._actor.stop(block=True)
            self._actor = None
        if self._log is not None and self._given_log is None:
            self._log.close()
        self._log = None

    def tick(self, now: float | None = None) -> None:
        """Run one liveness sweep (the ticker thread does this every ``sweep_interval``)."""
        if self._actor is not None:
            self._actor.tell(Tick(self._clock() if now is None else now))

    def describe(self) -> dict[str, Any]:
        """The actor's soft state, for tests and the CLI."""
        result: dict[str, Any] = self._actor.ask("describe")
        return result

    def _submit_internal(self, command: Command) -> None:
        actor = self._actor
        if actor is not None:
            actor.tell(Submit(command, None))

    def _tick_loop(self) -> None:
        while not self._stop_ticker.wait(self.config.sweep_interval):
            self.tick()

    def _on_request(self, request: Request, responder: Responder) -> None:
        # runs on the RPC server thread: decode here, decide on the actor thread
        command = decode_command(request.msg_type, request.body)
        actor = self._actor
        if actor is None:
            raise Unavailable("the master is starting or stopping")

        def reply(body: dict[str, Any] | None, error: CroupierError | None) -> None:
            if error is not None:
                responder.error(error)
            else:
                responder.ok(body)

        self._burst.append((command, reply))

    def _flush(self) -> None:
        # on the RPC server thread, after each burst it read: one actor message per burst
        if self._burst and self._actor is not None:
            burst, self._burst = self._burst, []
            self._actor.tell(SubmitMany(burst))
