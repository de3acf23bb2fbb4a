"""``Service``: the start/stop contract every long-running part follows, and its ``with`` form."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Service"]


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
