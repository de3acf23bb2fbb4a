"""Damage a committed partition copy on disk, as a bad disk or a torn write would.

No state and no threads. The files are found by the layout that
:mod:`croupier.storage.disk` documents:
``<dir>/<app_id>/<shuffle_id>/<partition>-<epoch>-<role>.data|.index``.
"""

from __future__ import annotations

import random
from pathlib import Path

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
        path = d / app_id / str(shuffle_id) / f"{name}.{kind}"
        if not path.exists():
            continue
        data = bytearray(path.read_bytes())
        if not data:
            continue
        if action == "flip":
            at = rng.randrange(len(data))
            data[at] ^= 0xFF
            done.append(f"flipped byte {at} of {path.name}")
        else:
            cut = min(_TRUNCATE, len(data))
            del data[-cut:]
            done.append(f"cut {cut} bytes off {path.name}")
        path.write_bytes(bytes(data))
    return done
