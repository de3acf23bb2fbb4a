"""``Service``: the start/stop contract every long-running part follows, its ``with`` form,
``raise_fd_limit``, which the master and the worker call as they start, and
``master_switch_interval``, which a process that runs a master sets. Stateless."""

from __future__ import annotations

import contextlib
import resource
import sys
from types import TracebackType
from typing import Self

__all__ = ["MASTER_SWITCH_INTERVAL", "Service", "master_switch_interval", "raise_fd_limit"]

# The GIL switch interval of a master's process (seconds; CPython's default is 0.005). A
# master's threads hand work to each other in bursts (RPC server -> actor -> group committer
# -> RPC server, issue 27); at 5 ms a waiting thread forces a GIL hand-over from a busy one
# so often that the hand-overs cost ~30 % of the master's CPU under the control bench.
MASTER_SWITCH_INTERVAL = 0.02


def raise_fd_limit() -> int:
    """DESIGN §11: take the hard limit of descriptors (a worker hosts thousands of locations,
    a master holds one socket per client). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
    return soft


def master_switch_interval(seconds: float = MASTER_SWITCH_INTERVAL) -> float:
    """Set this process's GIL switch interval for a master (``croupier master``, the control
    bench); returns the previous one. Not set by ``MasterService`` itself: a process that also
    runs workers or an application keeps its own."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    return previous


class Service:
    """Subclasses implement ``start`` (returns self; cleans up if it fails) and an idempotent ``stop``."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
