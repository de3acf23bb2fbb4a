"""The cluster secret (docs/guides/security.md): one file that every member (master, worker,
admin) reads, and from which every key is derived.

The file is one line, ``croupier-secret-v1:`` then 64 hex digits (32 random bytes),
then a newline, readable by its owner only (mode 0600). Keys are derived with blake3's
key-derivation mode, one context string per purpose, so that no key can be turned into
another:

- the **member key** signs the requests only members may send (PROTOCOL §2.1);
- the **app key** of an app is keyed blake3 of its id and its registration's key tag
  under the app-key root: a worker that knows the secret and the tag (from ``RESERVE``)
  computes it without asking the master, a new registration of an id gets a new key, and
  a client learns it only from ``REGISTER_APP`` (clients never need the secret);
- the **CURVE server key pair** (``--curve``) is derived too, so members need nothing
  but the file, and clients need only its public half (``croupier secret FILE --public``).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import blake3
import zmq
from zmq.utils import z85

from croupier.core.errors import BadRequest

__all__ = [
    "MAX_APP_TAGS",
    "SECRET_ENV",
    "AppTags",
    "ClusterSecret",
    "create_secret_file",
    "ensure_secret_file",
    "load_secret_file",
    "secret_file_from_env",
]

log = logging.getLogger(__name__)

SECRET_ENV = "CROUPIER_SECRET_FILE"
MAX_APP_TAGS = 100_000  # apps; about 200 bytes each
_PREFIX = "croupier-secret-v1:"
_RAW_SIZE = 32
_MEMBER_CONTEXT = "croupier 2026-12-01 member request key v1"
_APP_ROOT_CONTEXT = "croupier 2026-12-01 app key root v1"
_CURVE_CONTEXT = "croupier 2026-12-01 curve server secret v1"


@dataclass(frozen=True, slots=True)
class ClusterSecret:
    """The 32 secret bytes and the keys derived from them (all 32 bytes)."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != _RAW_SIZE:
            raise ValueError(f"a cluster secret is {_RAW_SIZE} bytes, got {len(self.raw)}")

    def __repr__(self) -> str:  # never print the secret
        return "ClusterSecret(<redacted>)"

    @property
    def member_key(self) -> bytes:
        """The key of member requests (masters, workers, admin)."""
        return blake3.blake3(self.raw, derive_key_context=_MEMBER_CONTEXT).digest()

    def app_key(self, app_id: str, key_tag: str = "") -> bytes:
        """The app key of one registration of ``app_id``: keyed blake3 under the app-key root
        of its UTF-8 id, then ``/`` and the registration's ``key_tag`` when it has one (an id
        never holds ``/``). Without a tag: the key of the id alone (apps logged before tags)."""
        root = blake3.blake3(self.raw, derive_key_context=_APP_ROOT_CONTEXT).digest()
        message = app_id if not key_tag else f"{app_id}/{key_tag}"
        return blake3.blake3(message.encode("utf-8"), key=root).digest()

    def curve_server_keys(self) -> tuple[bytes, bytes]:
        """``(public, secret)``: the Z85-encoded CURVE key pair every member's server binds with."""
        secret = z85.encode(blake3.blake3(self.raw, derive_key_context=_CURVE_CONTEXT).digest())
        return zmq.curve_public(secret), secret


class AppTags:
    """The key tag of each app's current registration that a server knows (PROTOCOL §2.1).

    A master holds every registered app's (its actor keeps the table in step with the
    fold); a worker those of the apps the master reserved locations on it for (``RESERVE``),
    until the app's ``DESTROY``. With the tag and the secret a server derives the app key
    itself: no lookup per request. Bounded: past ``cap`` apps the least recently used is
    forgotten (and logged; its requests are then answered as an unknown app's). Thread-safe.
    """

    def __init__(self, cap: int = MAX_APP_TAGS) -> None:
        self._cap = cap
        self._lock = threading.Lock()
        self._tags: OrderedDict[str, str] = OrderedDict()

    def set(self, app_id: str, tag: str | None) -> None:
        """``app_id``'s registration has ``tag`` (None or "": an app registered before tags)."""
        with self._lock:
            self._tags[app_id] = tag or ""
            self._tags.move_to_end(app_id)
            if len(self._tags) > self._cap:
                gone, _ = self._tags.popitem(last=False)
                log.warning("forgot the key tag of app %s: more than %d apps known here", gone, self._cap)

    def drop(self, app_id: str) -> None:
        """``app_id`` is gone (unregistered, expired or destroyed here)."""
        with self._lock:
            self._tags.pop(app_id, None)

    def reset(self, tags: Mapping[str, str]) -> None:
        """Know exactly ``tags`` (a master that (re)loaded its state, or stopped serving: ``{}``)."""
        with self._lock:
            self._tags = OrderedDict(tags)

    def get(self, app_id: str) -> str | None:
        """The tag of ``app_id`` ("" for an app from before tags), None if it is unknown here."""
        with self._lock:
            return self._tags.get(app_id)

    def __len__(self) -> int:
        return len(self._tags)


def _encode(secret: ClusterSecret) -> bytes:
    return f"{_PREFIX}{secret.raw.hex()}\n".encode("ascii")


def create_secret_file(path: str | Path) -> ClusterSecret:
    """Write a new secret to ``path`` (mode 0600; it must not exist yet) and return it.

    Raises:
        FileExistsError: ``path`` exists (a secret is never overwritten).
    """
    secret = ClusterSecret(secrets.token_bytes(_RAW_SIZE))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, _encode(secret))
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret


def load_secret_file(path: str | Path) -> ClusterSecret:
    """Read the secret at ``path``.

    Raises:
        BadRequest: the file is not a Croupier secret, or others than its owner may read it.
        FileNotFoundError: there is no such file.
    """
    target = Path(path)
    mode = target.stat().st_mode
    if mode & 0o077:
        raise BadRequest(
            f"the secret file {target} is readable by others (mode {mode & 0o777:o}); run chmod 600 {target}"
        )
    text = target.read_text("ascii", errors="replace").strip()
    if not text.startswith(_PREFIX):
        raise BadRequest(f"{target} is not a Croupier secret file (no {_PREFIX!r} prefix)")
    try:
        raw = bytes.fromhex(text[len(_PREFIX) :])
    except ValueError:
        raise BadRequest(f"{target}: the secret is not hex") from None
    if len(raw) != _RAW_SIZE:
        raise BadRequest(f"{target}: the secret has {len(raw)} bytes, not {_RAW_SIZE}")
    return ClusterSecret(raw)


def ensure_secret_file(path: str | Path) -> tuple[ClusterSecret, bool]:
    """``(secret, created)``: the secret at ``path``, created first when there is none."""
    try:
        return create_secret_file(path), True
    except FileExistsError:
        return load_secret_file(path), False


def secret_file_from_env(given: str | None) -> str | None:
    """The secret file to use: ``given`` (``--secret-file``), else ``$CROUPIER_SECRET_FILE``, else None."""
    return given or os.environ.get(SECRET_ENV) or None
