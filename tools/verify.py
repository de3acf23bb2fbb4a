"""``croupier verify``: verified shuffles under a seeded nemesis (DESIGN §12).

It starts its own local cluster (the embedded master and 3 workers as processes, or
with ``ha`` a local ZooKeeper, 3 masters and 3 workers), then runs ``shuffles`` small
shuffles one after the other. Each meets one fault from :func:`schedule` (kill -9,
restart, pause past the worker timeout, a damaged file, both copies damaged, kill -9
of the leading master) at one phase of its life, and every record is checked to read
back exactly once. Between shuffles the nemesis heals the cluster, so faults stay
single (after the last one the cluster just stops). The verdict is a fault x phase
matrix; the exit code is non-zero on any loss, duplicate, wrong record, false
``DataLost``, double fault read back short without ``DataLost``, or error that outlived
the retries. ``all-gone`` (kill -9 of every worker once the shuffle is offloaded) needs
an object store.

Everything runs in the caller's thread (the nemesis adds short-lived resume timers)
and is stopped before returning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.core.errors import CroupierError
from croupier.tools.verify_disks import small_disks
from croupier.tools.verify_faults import Fault, parse_faults, schedule
from croupier.tools.verify_report import Report
from croupier.tools.verify_shuffle import Outcome, Shape, run_shuffle

if TYPE_CHECKING:
    from croupier.services.local import LocalCluster

__all__ = ["main_verify", "run_verify"]

log = logging.getLogger(__name__)

# short timeouts, so a fault is noticed in seconds: a worker is declared lost after
# WORKER_TIMEOUT, and a paused one is frozen a little longer than that
WORKER_TIMEOUT = 3.0
PAUSE_FOR = WORKER_TIMEOUT + 1.5
_MASTER = MasterConfig(worker_timeout=WORKER_TIMEOUT, takeover_grace=1.0)
_WORKER = WorkerConfig(heartbeat_interval=0.5)
_CLIENT = ClientConfig(
    rpc_timeout=3.0,
    fetch_timeout=3.0,
    push_buffer_size=8 * 1024,
    app_heartbeat_interval=1.0,
    commit_wait_timeout=120.0,
)


def _worker_config(plan: list[Fault]) -> WorkerConfig:
    """The workers' settings: the memory tier off when a fault damages files, since a copy
    it holds is served from memory and its damaged file would never be read (the corrupt
    kinds model a bad disk under reads that reach it)."""
    if any(fault.kind.startswith("corrupt") for fault in plan):
        return dataclasses.replace(_WORKER, memory_tier_max=0)
    return _WORKER


def run_verify(
    shuffles: int,
    seed: int,
    *,
    ha: bool = False,
    faults: str | None = None,
    shape: Shape | None = None,
    on_shuffle: Callable[[int, Outcome, float], None] | None = None,
    curve: bool = False,
    secret_file: str | None = None,
    object_store: str | None = None,
) -> Report:
    """Run the verified shuffles; the report. ``on_shuffle(index, outcome, seconds)`` is
    called after each. ``curve``: every socket talks CURVE (keys from ``secret_file``).
    ``object_store`` (``s3://BUCKET/PREFIX``): the workers offload there and the reader falls
    back to it (needed by ``all-gone``, which kills every worker once the shuffle is offloaded).

    ``disk-full`` faults put every worker's directory on a small tmpfs (root only);
    ``double-kill`` faults add a 4th worker, so the rerun has two live workers to place on.

    Raises:
        ValueError: ``faults`` names an unknown kind or phase (see ``parse_faults``), or
            ``disk-full`` without root, ``all-gone`` without ``object_store``.
        ZooKeeperNotInstalled: ``ha`` without a ZooKeeper install.
    """
    import croupier
    from croupier.tools.nemesis import Nemesis

    shape = shape or Shape()
    plan = schedule(seed, _cells(faults, ha, object_store), shuffles, shape.partitions)
    report = Report(seed, ha)
    disks = contextlib.ExitStack()
    with (
        disks,
        _cluster(plan, disks, ha=ha, curve=curve, secret_file=secret_file, store=object_store) as cluster,
        croupier.connect(
            cluster.master_url, config=_CLIENT, curve_server_key=cluster.curve_server_key
        ) as client,
    ):
        client.object_store = object_store
        nemesis = Nemesis(cluster, pause_for=PAUSE_FOR, rng=random.Random(seed))
        try:
            app = client.register_app("verify")
            for i, fault in enumerate(plan):
                started = time.monotonic()
                try:
                    outcome = run_shuffle(app, nemesis, fault, shape, salt=seed * 100_003 + i)
                except (CroupierError, TimeoutError) as exc:
                    outcome = Outcome(fault, errors=[f"the shuffle broke off: {exc!r}"])
                if i < len(plan) - 1:  # the last shuffle's faults end with the cluster
                    nemesis.heal()
                report.add(i, outcome)
                if on_shuffle is not None:
                    on_shuffle(i, outcome, time.monotonic() - started)
            app.unregister()
        finally:
            nemesis.close()
    return report


def _cells(faults: str | None, ha: bool, object_store: str | None) -> list[tuple[str, str]]:
    """``parse_faults``, and ``all-gone`` only with an object store (ValueError otherwise)."""
    cells = parse_faults(faults, ha=ha)
    if object_store is None and any(kind == "all-gone" for kind, _ in cells):
        raise ValueError("the all-gone fault needs --object-store s3://BUCKET/PREFIX (and the AWS_* vars)")
    return cells


def _cluster(
    plan: list[Fault],
    disks: contextlib.ExitStack,
    *,
    ha: bool,
    curve: bool,
    secret_file: str | None,
    store: str | None = None,
) -> LocalCluster:
    """The verified cluster (not started); with ``disk-full`` in the plan, its workers'
    directories are small filesystems mounted through ``disks``; with ``double-kill``, 4
    workers (2 live ones when both copies' workers are dead, for the rerun's copies)."""
    from croupier.services.local import LocalCluster

    workers = 4 if any(f.recovers for f in plan) else 3
    base = None
    if any(f.kind == "disk-full" for f in plan):
        base = disks.enter_context(small_disks(Path(tempfile.mkdtemp(prefix="croupier-verify-")), workers))
    return LocalCluster(
        workers,
        base,
        processes=True,
        ha=ha,
        master_config=_MASTER,
        worker_config=dataclasses.replace(_worker_config(plan), object_store=store),
        session_timeout=2.0,
        curve=curve,
        secret_file=secret_file,
    )


def main_verify(
    shuffles: int,
    seed: int,
    *,
    ha: bool,
    faults: str | None,
    as_json: bool,
    curve: bool = False,
    secret_file: str | None = None,
    object_store: str | None = None,
) -> int:
    """The CLI: run, print the matrix (and with ``as_json`` one JSON line last on stdout).

    Returns 0 when every check held, 1 when one did not, 2 for bad arguments or no
    ZooKeeper install (with ``ha``).
    """
    if shuffles < 1:
        print("croupier verify: --shuffles must be at least 1", file=sys.stderr)
        return 2
    # the SDK's warnings about the faults this command causes on purpose would bury the matrix
    # (the level is put back after: a caller in the same process keeps its logging)
    croupier_log = logging.getLogger("croupier")
    level = croupier_log.level
    croupier_log.setLevel(max(logging.ERROR, logging.getLogger().level))
    try:
        return _verify(shuffles, seed, ha, faults, as_json, curve, secret_file, object_store)
    finally:
        croupier_log.setLevel(level)


def _verify(
    shuffles: int,
    seed: int,
    ha: bool,
    faults: str | None,
    as_json: bool,
    curve: bool,
    secret_file: str | None,
    object_store: str | None,
) -> int:
    from croupier.ha.zkserver import ZooKeeperNotInstalled

    def progress(i: int, outcome: Outcome, seconds: float) -> None:
        verdict = "ok" if outcome.ok else "FAILED"
        print(
            f"shuffle {i + 1}/{shuffles}: {outcome.fault.describe()}: {verdict} ({seconds:.1f} s)",
            file=sys.stderr,
        )

    try:
        _cells(faults, ha, object_store)
    except ValueError as exc:
        print(f"croupier verify: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_verify(
            shuffles,
            seed,
            ha=ha,
            faults=faults,
            on_shuffle=progress,
            curve=curve,
            secret_file=secret_file,
            object_store=object_store,
        )
    except ZooKeeperNotInstalled as exc:
        print(f"croupier verify --ha: {exc}", file=sys.stderr)
        return 2
    report.print(stderr=as_json)
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True))
    return 0 if report.ok else 1
