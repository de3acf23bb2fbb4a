"""The messages a ``MasterActor`` takes, and the small helpers of its replies.

Pure values and functions: the actor (``croupier.actors.master_actor``) handles them; the
front (``croupier.actors.master_front``) and the services send them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from croupier.actors.burst_gate import ReplyFn
from croupier.core.commands import Command, RegisterApp
from croupier.core.config import MasterConfig
from croupier.core.errors import CroupierError
from croupier.core.replies import (
    AppHeartbeatReply,
    RegisterAppReply,
    RegisterWorkerReply,
    WorkerHeartbeatReply,
)
from croupier.core.state import MasterState

__all__ = [
    "Describe",
    "GetStatus",
    "Inspect",
    "Ordered",
    "Reload",
    "SetWritable",
    "Submit",
    "SubmitMany",
    "Tick",
    "UnsignedRegisterApp",
    "answer_now",
    "deliver",
    "with_timeouts",
]

log = logging.getLogger("croupier.actors.master_actor")

_WORKER_REPLIES = (RegisterWorkerReply, WorkerHeartbeatReply)
_APP_REPLIES = (RegisterAppReply, AppHeartbeatReply)


@dataclass(frozen=True, slots=True)
class Submit:
    command: Command
    reply: ReplyFn | None


@dataclass(frozen=True, slots=True)
class SubmitMany:
    """A burst of commands read together, one actor message; ``validated``: by ``decode_command``."""

    items: list[tuple[Command, ReplyFn | None]]
    validated: bool = False


@dataclass(frozen=True, slots=True)
class UnsignedRegisterApp(RegisterApp):
    """A ``REGISTER_APP`` that came unsigned (PROTOCOL §2.1): it may create its app, but a
    repeat naming a registered app is ``UNAUTHORIZED`` (the reply would hand out its key)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Run the liveness sweep at time ``now``."""

    now: float


@dataclass(frozen=True, slots=True)
class Reload:
    """Rebuild the state from the log (after a failed append, or when the log is reachable again)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Ordered:
    """An order of the owner (``Reload``, ``SetWritable``) counted by the ``BurstGate``: the
    bursts read after it wait in the mailbox until the actor has obeyed it."""

    message: Any


@dataclass(frozen=True, slots=True)
class SetWritable:
    """Accept (True) or refuse (False) commands that log events; reads go on either way."""

    writable: bool
    reason: str = ""


def with_timeouts(body: Any, config: MasterConfig) -> Any:
    """``body`` with the timeout its receiver heartbeats against (PROTOCOL §4), at registration and
    in every beat's reply, so that a member beating at a third of it is never declared lost."""
    if isinstance(body, _WORKER_REPLIES):
        return dataclasses.replace(body, worker_timeout=config.worker_timeout)
    if isinstance(body, _APP_REPLIES):
        return dataclasses.replace(body, app_timeout=config.app_timeout)
    return body


@dataclass(frozen=True, slots=True)
class Describe:
    """Ask: the actor's soft state, a ``MasterInfo`` (tests and the CLI)."""


@dataclass(frozen=True, slots=True)
class GetStatus:
    """Ask: STATUS as an admin would get it, as JSON values (the HTTP API and the metrics)."""


@dataclass(frozen=True, slots=True)
class Inspect:
    """Ask: ``fn(state)``, run on the actor's thread (the HTTP API reads the state this way)."""

    fn: Callable[[MasterState], Any]


def answer_now(reply: ReplyFn | None, body: dict[str, Any]) -> None:
    """Reply on this thread (a read whose state is durable), as the committer would."""
    if reply is None:
        return
    try:
        reply(body, None)
    except Exception:
        log.exception("reply callback failed")


def deliver(
    reply: ReplyFn | None, body: dict[str, Any] | None, error: CroupierError | None
) -> Callable[[CroupierError | None], None] | None:
    """The committer's callback of ``reply``: once its group is logged, ``body`` or ``error``;
    the log's error when the append failed. None for an internal command (no reply)."""
    if reply is None:
        if error is not None and not error.retriable:
            log.debug("internal command refused: %s", error)
        return None

    def done(log_error: CroupierError | None) -> None:
        if log_error is not None:
            reply(None, log_error)
        else:
            reply(body, error)

    return done
