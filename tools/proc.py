"""What a live process has used, read from Linux's ``/proc``: CPU seconds and peak RSS.

No state and no threads: each call reads the files once. A process that is gone (or a
system without ``/proc``) reads as 0.
"""

from __future__ import annotations

import os

__all__ = ["cpu_seconds", "peak_rss"]

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
