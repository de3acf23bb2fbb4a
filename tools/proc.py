"""What a live process has used, read from Linux's ``/proc``: CPU seconds (the process's, or
each thread's with its OS name: ``ops/thread_names.py``) and peak RSS.

No state and no threads: each call reads the files once. A process that is gone (or a
system without ``/proc``) reads as 0.
"""

from __future__ import annotations

import os

__all__ = ["cpu_seconds", "peak_rss", "thread_cpu", "thread_cpu_delta"]

# utime and stime are fields 14 and 15 of /proc/PID/stat (proc(5)); counted here from
# the field after the command name, which is field 3
_UTIME = 14 - 3
_STIME = 15 - 3


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` (all its threads) so far, in seconds; 0.0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return 0.0
    # the command name (field 2) is in parentheses and may itself hold spaces or ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[_UTIME]) + int(fields[_STIME])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int:
    """VmHWM of a live process, in bytes (0 if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """Per ``(pid, tid)`` of the live threads of ``pids``: the thread's OS name and its user
    plus system CPU so far, in seconds (a thread gone meanwhile is left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                    name = fh.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            out[(pid, int(tid))] = (name, (int(fields[_UTIME]) + int(fields[_STIME])) / tick)
    return out


def thread_cpu_delta(
    before: dict[tuple[int, int], tuple[str, float]], after: dict[tuple[int, int], tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds between two ``thread_cpu`` readings per thread kind: the names as they were
    at ``after``, their trailing digits and separators dropped (``PartitionActor-3`` and
    ``PartitionActor-7`` add up). A thread that ended between the readings is not counted."""
    out: dict[str, float] = {}
    for key, (name, cpu) in after.items():
        kind = name.rstrip("0123456789-_/") or name
        out[kind] = out.get(kind, 0.0) + cpu - before.get(key, (name, 0.0))[1]
    return out
