"""The OS names of a process's Python threads: each one's ``threading`` name, written to
``/proc/self/task/TID/comm``, so that ``top -H``, ``ps -L`` and ``/proc`` tell the threads of a
worker or master apart (CPython leaves them all named after the executable).

Linux keeps 15 bytes of a name: the ``croupier-`` prefix is dropped first
(``croupier-worker-push`` is ``worker-push``). The main thread keeps its name, which is the
process's in ``ps`` and ``top``. A thread named once is not written again;
a system without ``/proc`` names nothing. Called from the main thread of a server while it
waits for its signal (``services/cli/_common.py``), so threads started later are named
within a second.
"""

from __future__ import annotations

import threading

__all__ = ["COMM_BYTES", "name_os_threads", "os_name"]

COMM_BYTES = 15
_named: set[int] = set()


def os_name(name: str) -> str:
    """The OS name a thread called ``name`` gets: ASCII, without ``croupier-``, 15 bytes at most."""
    return name.removeprefix("croupier-").encode("ascii", "replace")[:COMM_BYTES].decode("ascii")


def name_os_threads() -> int:
    """Name every live Python thread not named yet; how many were named now."""
    done = 0
    main = threading.main_thread().native_id  # its name is the process's (``ps``, ``top``): kept
    live = {t.native_id: t.name for t in threading.enumerate() if t.native_id not in (None, main)}
    _named.intersection_update(live)  # native ids are reused once a thread is gone
    for tid, name in live.items():
        if tid in _named:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", "w") as fh:
                fh.write(os_name(name))
        except OSError:  # gone meanwhile, or no /proc
            continue
        _named.add(tid)
        done += 1
    return done
