"""The ports the SDK's handles are given: what ``App``, ``Shuffle``, ``Writer`` and ``Reader``
need from the outside, passed in by the ``Client`` that makes them (STYLE 3)."""

from __future__ import annotations

from typing import Protocol, TypeVar

from croupier.core.commands import Command

__all__ = ["MasterPort"]

R = TypeVar("R")


class MasterPort(Protocol):
    """Typed commands to the master, wherever the leader is
    (``croupier.transports.master_client.MasterClient`` is the real one)."""

    def request(self, command: Command, reply_type: type[R], *, timeout: float | None = None) -> R:
        """Send ``command``; its reply, checked and built as ``reply_type``.

        Raises:
            CroupierError: the master refused it, or no leader answered in time.
        """
        ...
