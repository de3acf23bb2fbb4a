"""``Service``: the start/stop contract every long-running part follows, its ``with`` form,
and ``raise_fd_limit``, which the master and the worker call as they start. Stateless."""

from __future__ import annotations

import contextlib
import resource
from types import TracebackType
from typing import Self

__all__ = ["Service", "raise_fd_limit"]


def raise_fd_limit() -> int:
    """DESIGN §11: take the hard limit of descriptors (a worker hosts thousands of locations,
    a master holds one socket per client). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
    return soft


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
