"""``croupier local``: a master and N workers as processes in the foreground."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from croupier.core.config import WorkerConfig
from croupier.services.cli._common import (
    _add_curve_flags,
    _add_quota_flags,
    _add_secret_flag,
    _quota_argv,
    _secret_env,
    _Subparsers,
    _wait_for_signal,
    sigterm_unwinds,
)
from croupier.services.cli.worker import add_worker_settings, worker_config

ORDER = 40  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_local(sub)
    _add_curve_flags(sub.choices["local"])


def _add_local(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    loc = sub.add_parser("local", help="a master and N workers in the foreground")
    loc.add_argument("--workers", type=int, default=3)
    loc.add_argument("--data-dir", help="where data and logs go (default: a temporary directory)")
    loc.add_argument("--ha", action="store_true")
    _add_quota_flags(loc)
    add_worker_settings(loc)  # its workers' (``[worker]`` and ``CROUPIER_WORKER_*`` apply too)
    _add_secret_flag(loc, "the cluster secret (default: <data-dir>/secret, created)")
    loc.set_defaults(func=cmd_local)


def cmd_local(args: argparse.Namespace) -> int:
    from croupier.ha.zkserver import ZooKeeperNotInstalled

    try:
        return _run_local(args)
    except ZooKeeperNotInstalled as exc:
        print(f"croupier local --ha: {exc}", file=sys.stderr)
        return 2


def _local_worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The workers' settings: the worker flags given (or from ``[worker]``, ``CROUPIER_WORKER_*``);
    without ``--heartbeat`` they beat every second, as ``LocalCluster``'s did (a live status page)."""
    config = worker_config(args)
    return config if config.heartbeat_interval is not None else replace(config, heartbeat_interval=1.0)


def _run_local(args: argparse.Namespace) -> int:
    from croupier.services.local import LocalCluster

    _secret_env(args)
    with (
        sigterm_unwinds(),
        LocalCluster(
            args.workers,
            args.data_dir,
            processes=True,
            ha=args.ha,
            master_args=_quota_argv(args),
            worker_config=_local_worker_config(args),
            curve=args.curve,
        ) as cluster,
    ):
        print(cluster.master_url, flush=True)
        if cluster.curve is not None:
            print(
                "croupier local: CURVE on; clients need"
                f" CROUPIER_CURVE_SERVER_KEY='{cluster.curve_server_key}'",
                file=sys.stderr,
            )
        print(
            f"croupier local: a master and {args.workers} workers under {cluster.base_dir};"
            f" the cluster secret is {cluster.secret_file}; Ctrl-C stops them",
            file=sys.stderr,
        )
        http = (cluster.status().get("master") or {}).get("http")
        if http:
            print(f"croupier local: status page and metrics at {http}", file=sys.stderr)
        _wait_for_signal()
    return 0
