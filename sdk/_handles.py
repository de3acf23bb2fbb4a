"""Handle strings: ``Shuffle.handle()`` and ``App.handle()`` (PROTOCOL §4.3), and REGISTER_APP's key.

A handle names an app (and a shuffle) and carries the app key of one registration, so that
another process can act as the app. Parsing never repeats a key in an error message.
"""

from __future__ import annotations

from croupier.core.errors import BadRequest, InternalError

__all__ = ["APP_HANDLE_PREFIX", "HANDLE_PREFIX", "parse_app_handle", "parse_handle"]

HANDLE_PREFIX = "croupier-shuffle-v1"
APP_HANDLE_PREFIX = "croupier-app-v1"
_KEY_HEX = 64


def _app_key(text: str | None) -> bytes | None:
    """The app key REGISTER_APP answered (64 hex digits), as bytes.

    Raises:
        InternalError: the master sent something else.
    """
    if text is None:
        return None
    if len(text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in text):
        raise InternalError("the master's REGISTER_APP reply has a malformed app_key")
    return bytes.fromhex(text)


def parse_handle(handle: str) -> tuple[str, int, bytes | None]:
    """``(app_id, shuffle_id, app key or None)`` from ``Shuffle.handle()``'s string.

    Raises:
        BadRequest: ``handle`` is not a shuffle handle (the message never repeats its key).
    """
    parts = handle.split(":") if isinstance(handle, str) else []
    if len(parts) != 4 or parts[0] != HANDLE_PREFIX:
        raise BadRequest(f"not a shuffle handle: expected {HANDLE_PREFIX}:<app_id>:<shuffle_id>:<key>")
    _, app_id, shuffle_text, key_text = parts
    if not (shuffle_text.isascii() and shuffle_text.isdigit()) or not app_id:
        raise BadRequest("not a shuffle handle: its app id or shuffle id is malformed")
    if key_text and (len(key_text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in key_text)):
        raise BadRequest(f"not a shuffle handle: its key is not {_KEY_HEX} lowercase hex digits")
    return app_id, int(shuffle_text), bytes.fromhex(key_text) if key_text else None


def parse_app_handle(handle: str) -> tuple[str, bytes | None]:
    """``(app_id, app key or None)`` from ``App.handle()``'s string.

    Raises:
        BadRequest: ``handle`` is not an app handle (the message never repeats its key).
    """
    parts = handle.split(":") if isinstance(handle, str) else []
    if len(parts) != 3 or parts[0] != APP_HANDLE_PREFIX:
        raise BadRequest(f"not an app handle: expected {APP_HANDLE_PREFIX}:<app_id>:<key>")
    _, app_id, key_text = parts
    if not app_id:
        raise BadRequest("not an app handle: its app id is empty")
    if key_text and (len(key_text) != _KEY_HEX or any(c not in "0123456789abcdef" for c in key_text)):
        raise BadRequest(f"not an app handle: its key is not {_KEY_HEX} lowercase hex digits")
    return app_id, bytes.fromhex(key_text) if key_text else None
