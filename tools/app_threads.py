"""Master threads and RSS against the number of registered apps (issue 13: one thread per app).

Usage::

    python -m croupier.tools.app_threads 10 5000

Starts a ``croupier master`` subprocess (its file log in a temporary directory),
registers apps in batches and prints, per count, the master's threads and RSS read from
``/proc/<pid>/status``. Stops the master and removes the directory at the end.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from croupier.core.commands import RegisterApp
from croupier.transports.master_client import MasterClient

__all__ = ["main", "measure"]


def _proc_status(pid: int) -> tuple[int, int]:
    """``(threads, RSS in KiB)`` of a process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0])


def measure(counts: list[int]) -> list[tuple[int, int, int]]:
    """``(apps, threads, RSS KiB)`` after registering each count of apps in ascending order."""
    rows: list[tuple[int, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cli = [sys.executable, "-m", "croupier.services.cli", "master", "--listen", "127.0.0.1:0"]
        args = [*cli, "--data-dir", tmp, "--max-apps", str(max(counts))]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().decode().strip()
            registered = 0
            with MasterClient(url, timeout=30, attempts=1) as client:
                rows.append((0, *_proc_status(proc.pid)))
                for count in sorted(counts):
                    while registered < count:
                        client.call(RegisterApp(f"app{registered}"))
                        registered += 1
                    time.sleep(0.5)  # let the app actors' threads settle
                    rows.append((count, *_proc_status(proc.pid)))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print one ``apps threads rss_mib`` line per count."""
    counts = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [10, 5000]
    print("apps  threads  rss_mib")
    for apps, threads, rss in measure(counts):
        print(f"{apps:5d}  {threads:7d}  {rss / 1024:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
