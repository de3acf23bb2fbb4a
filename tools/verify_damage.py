"""Damage a committed partition copy on disk, as a bad disk or a torn write would.

No state and no threads. The files are found by the layout that
:mod:`croupier.storage.disk` documents: ``<dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.data``,
and the copy's record (its line) in ``<dir>/<app_id>/<shuffle_id>/index.log``, or an older
version's ``<partition>-<epoch>-<role>.index``. A damaged record keeps its line's end, so the
records around it stay whole.
"""

from __future__ import annotations

import random
from pathlib import Path

from croupier.storage.index_file import decode_record
from croupier.storage.index_log import LOG_NAME

__all__ = ["DAMAGES", "damage_copy"]

# what happens to the file: a flipped byte, or its last 10 bytes cut off
DAMAGES = ("flip-data", "flip-index", "truncate-data", "truncate-index")

_TRUNCATE = 10


def damage_copy(
    dirs: list[Path], app_id: str, shuffle_id: int, name: str, how: str, rng: random.Random
) -> list[str]:
    """Damage the file(s) of one copy (``name`` is ``<partition>-<epoch>-<role>``) in ``dirs``.

    Returns what was done, one line per file (empty when the copy has no such file).

    Raises:
        ValueError: ``how`` is not one of :data:`DAMAGES`.
    """
    if how not in DAMAGES:
        raise ValueError(f"unknown damage {how!r} (known: {', '.join(DAMAGES)})")
    action, _, kind = how.partition("-")
    done = []
    for d in dirs:
        folder = d / app_id / str(shuffle_id)
        path = folder / f"{name}.{kind}"
        if path.exists():
            data = bytearray(path.read_bytes())
            if data:
                done.append(_damage(data, action, path.name, rng))
                path.write_bytes(bytes(data))
        if kind == "index" and (folder / LOG_NAME).exists():
            done.extend(_damage_record(folder / LOG_NAME, name, action, rng))
    return done


def _damage(data: bytearray, action: str, what: str, rng: random.Random) -> str:
    """Flip one byte of ``data`` or cut its last bytes off, in place; what was done."""
    if action == "flip":
        at = rng.randrange(len(data))
        data[at] ^= 0xFF
        return f"flipped byte {at} of {what}"
    cut = min(_TRUNCATE, len(data))
    del data[-cut:]
    return f"cut {cut} bytes off {what}"


def _damage_record(log_path: Path, name: str, action: str, rng: random.Random) -> list[str]:
    """Damage each of ``name``'s records in an index log (each keeps its line's end)."""
    lines = log_path.read_bytes().splitlines(keepends=True)
    done = []
    for n, line in enumerate(lines):
        try:
            key, _ = decode_record(line.rstrip(b"\n"))
        except ValueError:
            continue
        if key.name != name:
            continue
        body = bytearray(line.rstrip(b"\n"))
        done.append(_damage(body, action, f"record {n + 1} ({name}) of {log_path.name}", rng))
        lines[n] = bytes(body) + b"\n"
    if done:
        log_path.write_bytes(b"".join(lines))
    return done
