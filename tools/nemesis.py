"""``Nemesis``: applies ``croupier verify``'s faults to a local cluster, then heals it.

State it owns: a master client (to find which worker holds a copy), the workers it
paused and the timers that will continue them, and a random generator for where files
are damaged. Everything runs in the caller's thread except the resume timers, whose
only act is a SIGCONT. ``disk-full`` writes a file taking all the free space of the
target worker's directories (small filesystems, see ``croupier verify``); ``heal``
deletes it.

Usage::

    nemesis = Nemesis(cluster, pause_for=4.5, rng=random.Random(seed))
    try:
        nemesis.fire(fault, app_id, shuffle_id)
        ...
        nemesis.heal()  # every worker (and master) back, registered
    finally:
        nemesis.close()
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from pathlib import Path

from croupier.core.commands import GetLocations, Status, encode_command, usable
from croupier.core.errors import CroupierError
from croupier.core.replies import LocationsReply, StatusReply
from croupier.services.local import LocalCluster
from croupier.tools.verify_damage import damage_copy
from croupier.tools.verify_faults import Fault
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient

__all__ = ["Nemesis"]

log = logging.getLogger(__name__)

_WORKER_KINDS = ("kill", "restart", "pause")
_FILLER = "nemesis-disk-full"  # not a name the store lists (DESIGN §10)


class Nemesis:
    """Parameters:
    cluster: a started ``LocalCluster`` with ``processes=True``.
    pause_for: how long a paused worker stays frozen (past the master's worker timeout).
    rng: draws the damaged byte positions.
    """

    def __init__(self, cluster: LocalCluster, *, pause_for: float, rng: random.Random) -> None:
        self._cluster = cluster
        self._pause_for = pause_for
        self._rng = rng
        self._signer = Signer.member(cluster.secret)
        self._master = MasterClient(
            cluster.master_url,
            timeout=5.0,
            attempts=5,
            deadline=60.0,
            curve=cluster.client_curve(),
            signer=self._signer,
        )
        self._held: set[int] = set()
        self._timers: dict[int, threading.Timer] = {}
        self._fillers: list[Path] = []  # what disk-full wrote, deleted by heal
        self.killed: set[str] = set()  # the ids of the workers double-kill stopped, until heal

    def hold(self, fault: Fault, app_id: str, shuffle_id: int) -> None:
        """For ``during-commit``: freeze the target worker before the last map ends, so the
        commit waits on it when the fault fires (a no-op for other phases and kinds)."""
        if fault.phase == "during-commit" and fault.kind in _WORKER_KINDS:
            i = self._target(fault, app_id, shuffle_id)
            self._cluster.pause_worker(i)
            self._held.add(i)

    def fire(self, fault: Fault, app_id: str, shuffle_id: int) -> list[str]:
        """Apply ``fault`` now; returns what was done, for the report.

        Raises:
            CroupierError: the master could not say where the target copy lives.
        """
        if fault.kind == "leader":
            i = self._leader()
            self._cluster.kill_master(i)
            return [f"kill -9 of master {i} (the leader)"]
        if fault.kind.startswith("corrupt"):
            return self._corrupt(fault, app_id, shuffle_id)
        if fault.kind == "double-kill":
            return self._kill_both(fault, app_id, shuffle_id)
        if fault.kind == "all-gone":
            return self._kill_all()
        i = self._target(fault, app_id, shuffle_id)
        if fault.kind == "disk-full":
            return self._fill(i)
        if fault.kind == "pause":
            self._pause(i)
            return [f"SIGSTOP of worker {i} for {self._pause_for:g} s"]
        self._cluster.kill_worker(i)
        self._held.discard(i)
        if fault.kind == "restart":
            self._cluster.restart_worker(i)
            return [f"kill -9 of worker {i}, started again on its dirs"]
        return [f"kill -9 of worker {i}"]

    def heal(self, timeout: float = 60.0) -> None:
        """Continue paused workers, start killed ones (and killed masters), and wait until
        every worker is registered again, so the next shuffle meets one fault only."""
        cluster = self._cluster
        filled = bool(self._fillers)
        self.killed.clear()
        self._unfill()
        for i, timer in list(self._timers.items()):
            timer.cancel()
            timer.join()
            del self._timers[i]
        for i in sorted(self._held):
            cluster.resume_worker(i)
        self._held.clear()
        for i in range(cluster.num_workers):
            if not cluster.worker_running(i):
                cluster.restart_worker(i)
        for i in range(cluster.num_masters if cluster.ha else 0):
            if not cluster.master_running(i):
                cluster.start_master(i)
        cluster.wait_for_workers(cluster.num_workers, timeout)
        if filled:
            self._wait_usable(timeout)

    def _wait_usable(self, timeout: float) -> None:
        """Wait until the master's view of every worker's disks (heartbeats) has room again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            master = self._master.request(Status(), StatusReply).master
            reported = (master.worker_dirs if master is not None else None) or {}
            if len(reported) >= self._cluster.num_workers and all(usable(d) for d in reported.values()):
                return
            time.sleep(0.1)
        raise TimeoutError("the master still sees a full disk after the fillers went")

    def close(self) -> None:
        """Continue whatever is still paused and close the master client. Idempotent."""
        for timer in self._timers.values():
            timer.cancel()
            timer.join()
        self._timers.clear()
        for i in self._held:
            self._cluster.resume_worker(i)
        self._held.clear()
        self._unfill()
        self._master.close()

    # -- targets --------------------------------------------------------------------------------
    def _locations(self, fault: Fault, app_id: str, shuffle_id: int) -> LocationsReply:
        return self._master.request(GetLocations(app_id, shuffle_id, fault.partition), LocationsReply)

    def _target(self, fault: Fault, app_id: str, shuffle_id: int) -> int:
        """The index of the worker holding ``fault``'s copy in the partition's latest epoch."""
        location = self._locations(fault, app_id, shuffle_id).locations[-1]
        address = (
            location.primary if fault.role == "primary" or location.replica is None else location.replica
        )
        return self._cluster.worker_ids().index(address.worker_id)

    def _leader(self) -> int:
        """The index of the leading master, asked of each (followers answer STATUS too)."""
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            for i, url in enumerate(self._cluster.master_urls()):
                if not self._cluster.master_running(i):
                    continue
                try:
                    with RpcClient(
                        url, timeout=2.0, retries=0, curve=self._cluster.client_curve(), signer=self._signer
                    ) as rpc:
                        status = rpc.call(*encode_command(Status())).body
                except CroupierError:
                    continue
                if status.get("master", {}).get("role") == "leader":
                    return i
            time.sleep(0.1)
        raise TimeoutError("no master says it leads")

    # -- actions --------------------------------------------------------------------------------
    def _pause(self, i: int) -> None:
        """Freeze worker ``i`` (if ``hold`` has not already) and continue it after ``pause_for``."""
        if i not in self._held:
            self._cluster.pause_worker(i)
            self._held.add(i)
        timer = threading.Timer(self._pause_for, self._resume, args=(i,))
        timer.name = f"verify-resume-worker-{i}"
        self._timers[i] = timer
        timer.start()

    def _resume(self, i: int) -> None:
        self._cluster.resume_worker(i)

    def _kill_both(self, fault: Fault, app_id: str, shuffle_id: int) -> list[str]:
        """kill -9 of both workers holding the partition's copies in its latest epoch."""
        location = self._locations(fault, app_id, shuffle_id).locations[-1]
        ids = self._cluster.worker_ids()
        done = []
        for _, address in location.copies():
            i = ids.index(address.worker_id)
            self._cluster.kill_worker(i)
            self._held.discard(i)
            self.killed.add(address.worker_id)
            done.append(f"kill -9 of worker {i}")
        return done

    def _kill_all(self) -> list[str]:
        """kill -9 of every worker (the shuffle was offloaded first: issue 26's scale to zero)."""
        ids = self._cluster.worker_ids()
        for i in range(self._cluster.num_workers):
            self._cluster.kill_worker(i)
            self._held.discard(i)
            self.killed.add(ids[i])
        return [f"kill -9 of all {self._cluster.num_workers} workers"]

    def _fill(self, i: int) -> list[str]:
        """Fill every data directory of worker ``i``: a file takes all their free space."""
        done = []
        for d in self._cluster.worker_dirs(i):
            path = d / _FILLER
            self._fillers.append(path)
            st = os.statvfs(d)
            size = st.f_bavail * st.f_frsize
            with open(path, "ab") as fh:
                try:
                    os.posix_fallocate(fh.fileno(), 0, size)
                except OSError:  # not supported, or some space went meanwhile: zeros as far as they go
                    with contextlib.suppress(OSError):
                        while True:
                            fh.write(bytes(1024 * 1024))
                            fh.flush()
            done.append(f"filled {d} on worker {i} ({size // 1024**2} MiB)")
        return done

    def _unfill(self) -> None:
        for path in self._fillers:
            path.unlink(missing_ok=True)
        self._fillers.clear()

    def _corrupt(self, fault: Fault, app_id: str, shuffle_id: int) -> list[str]:
        """Damage the target copy, or (``corrupt-both``) every copy of the partition; then
        restart the workers that hold them if the fault says so."""
        reply = self._locations(fault, app_id, shuffle_id)
        ids = self._cluster.worker_ids()
        hit: list[tuple[int, str]] = []
        for location in reply.locations:
            for role, address in location.copies():
                if fault.double or (role == fault.role and location is reply.locations[-1]):
                    hit.append((ids.index(address.worker_id), f"{fault.partition}-{location.epoch}-{role}"))
        done: list[str] = []
        for i, name in hit:
            dirs = self._cluster.worker_dirs(i)
            done += [
                f"worker {i}: {d}"
                for d in damage_copy(dirs, app_id, shuffle_id, name, fault.damage, self._rng)
            ]
        for i in sorted({i for i, _ in hit}) if fault.restart else ():
            self._cluster.restart_worker(i)
            done.append(f"restarted worker {i}")
        return done
