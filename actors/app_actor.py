"""``AppActor``: one per registered app, on the master.

State it owns:
    last_seen   the time of the app's last heartbeat (soft state, never logged)
    shuffles    the app's registered shuffle ids

Threads: every hook runs on the actor's own pykka thread. The master actor
``tell``s it heartbeats, shuffle changes and sweep ticks; when heartbeats have
stopped for ``timeout`` it ``tell``s the master an ``ExpireApp`` command once.
It never ``.get()``s a future (that could deadlock two actors).

``AppActor.start`` raises ``RuntimeError`` when no thread can be started (a pids
limit); the actor is then left unregistered, so nothing waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from croupier.core.commands import Command, ExpireApp
from croupier.transports.log_context import id_fields

__all__ = ["AppActor", "AppHeartbeatSeen", "AppShuffleAdded", "AppShuffleRemoved", "AppTick"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DescribeApp:
    """Ask: the app's id, when it was last seen and its shuffles (JSON values)."""


@dataclass(frozen=True, slots=True)
class AppHeartbeatSeen:
    now: float


@dataclass(frozen=True, slots=True)
class AppShuffleAdded:
    shuffle_id: int


@dataclass(frozen=True, slots=True)
class AppShuffleRemoved:
    shuffle_id: int


@dataclass(frozen=True, slots=True)
class AppTick:
    now: float


class AppActor(pykka.ThreadingActor):
    """Heartbeat expiry and the shuffle list of one app.

    Parameters:
        app_id: the app.
        now: the time it was registered (or the master took over).
        timeout: heartbeat timeout.
        submit: hands a command to the master (non-blocking).
    """

    def __init__(self, app_id: str, now: float, timeout: float, submit: Callable[[Command], None]) -> None:
        super().__init__()
        self.app_id = app_id
        self.last_seen = now
        self.started = now
        self.beats = 0  # heartbeats seen (the expiry's warning says whether any came)
        self.timeout = timeout
        self.shuffles: set[int] = set()
        self._submit = submit
        self._expiring = False

    def _start_actor_loop(self) -> None:
        # pykka registers the actor before it starts the thread; if the thread cannot start,
        # ActorRegistry.stop_all would wait forever for an actor that never ran
        try:
            super()._start_actor_loop()
        except RuntimeError:
            pykka.ActorRegistry.unregister(self.actor_ref)
            raise

    def on_receive(self, message: Any) -> Any:
        match message:
            case AppHeartbeatSeen(now):
                self.last_seen = max(self.last_seen, now)
                self.beats += 1
                self._expiring = False
            case AppShuffleAdded(sid):
                self.shuffles.add(sid)
            case AppShuffleRemoved(sid):
                self.shuffles.discard(sid)
            case AppTick(now):
                if not self._expiring and now - self.last_seen > self.timeout:
                    self._expiring = True
                    log.warning(
                        "app %s sent no heartbeat for %.1fs (timeout %.1fs; %d heartbeats seen in the %.1fs"
                        " since it was registered or the master took over): expiring it and %d shuffles",
                        self.app_id,
                        now - self.last_seen,
                        self.timeout,
                        self.beats,
                        now - self.started,
                        len(self.shuffles),
                        extra=id_fields(self.app_id, None),
                    )
                    self._submit(ExpireApp(self.app_id))
            case DescribeApp():
                return {"app_id": self.app_id, "last_seen": self.last_seen, "shuffles": sorted(self.shuffles)}
            case _:
                log.warning("AppActor %s ignored unknown message %r", self.app_id, message)
        return None
