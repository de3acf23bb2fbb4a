"""The key tag file of an app on a worker's disk: ``<dir>/<app_id>/key_tag`` (PROTOCOL §5.4).

A worker derives an app's key from the cluster secret and the key tag of the app's
registration (PROTOCOL §2.1), which the master sends in ``RESERVE`` and ``COMMIT_FILES``.
A restarted worker must serve the committed files it finds on disk before the master tells
it the tag again (the master may be down), so the tag is kept beside the app's files: one
line, the 16 lowercase hex digits (empty for an app registered before key tags) and ``\\n``.
It is no secret: without the cluster secret it yields no key (the master logs it too).

Written atomically (``key_tag.tmp``, then rename; with fsync the file and the directory are
fsync'ed); read back at start. Anything else in the file (damaged, another format) is
ignored with a warning: the app's files are then refused until the master sends the tag.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from croupier.storage._fds import FdCache, fsync_dir

__all__ = ["KEY_TAG_FILE", "read_key_tag", "write_key_tag"]

log = logging.getLogger(__name__)

KEY_TAG_FILE = "key_tag"
_TMP = KEY_TAG_FILE + ".tmp"
_CONTENT_RE = re.compile(rb"((?:[0-9a-f]{16})?)\n")


def write_key_tag(app_dir: Path, tag: str, *, fsync: bool, fds: FdCache) -> None:
    """Make ``<app_dir>/key_tag`` hold ``tag`` (creating ``app_dir``), atomically.

    Raises:
        OSError: the file or the directory cannot be written.
    """
    root = app_dir.parent
    new_dir = not app_dir.is_dir()
    app_dir.mkdir(parents=True, exist_ok=True)
    tmp = app_dir / _TMP
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{tag}\n".encode("ascii"))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, app_dir / KEY_TAG_FILE)
    if fsync:
        fsync_dir(fds, app_dir)
        if new_dir:
            fsync_dir(fds, root)


def read_key_tag(app_dir: Path) -> str | None:
    """The tag kept in ``<app_dir>/key_tag``; None when there is none (or it is damaged: logged)."""
    path = app_dir / KEY_TAG_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read the key tag %s: %s", path, exc)
        return None
    m = _CONTENT_RE.fullmatch(raw)
    if m is None:
        log.warning("ignoring the damaged key tag file %s", path)
        return None
    return m[1].decode("ascii")
