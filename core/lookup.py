"""The app and the shuffle a command names, or the error that says they are not known."""

from __future__ import annotations

from croupier.core.errors import UnknownApp, UnknownShuffle
from croupier.core.state import MasterState, ShuffleInfo

__all__ = ["need_app", "need_shuffle"]


def need_app(state: MasterState, app_id: str) -> None:
    """Raises UnknownApp: ``app_id`` is not registered."""
    if app_id not in state.apps:
        raise UnknownApp(f"app {app_id!r} is not registered (unregistered, expired, or never known)")


def need_shuffle(state: MasterState, app_id: str, shuffle_id: int) -> ShuffleInfo:
    """The shuffle ``app_id``/``shuffle_id``.

    Raises:
        UnknownApp: the app is not registered.
        UnknownShuffle: the shuffle is not.
    """
    need_app(state, app_id)
    info = state.shuffle(app_id, shuffle_id)
    if info is None:
        raise UnknownShuffle(f"shuffle {app_id}/{shuffle_id} is not registered")
    return info
