"""The ``croupier`` command line (DESIGN §12). Names here are a public contract.

croupier master [--listen HOST:PORT] [--data-dir DIR] [--ha zk://HOSTS/ROOT] [--max-apps N]
               [--tenants FILE] [--max-shuffles N] [--max-partitions N] [--max-bytes-in-flight SIZE]
               [--max-bytes-stored SIZE]
croupier worker --master URL [--listen HOST] [--dirs DIR[,DIR...]]
                [--throttle-window 5min] [--throttle-floor 200MB] [--throttle-z 3] [--no-throttle]
                [--split-threshold 1GiB]
croupier local [--workers N] [--tenants FILE] [--max-shuffles N ...]
croupier demo [--size SIZE] [--mappers M] [--partitions R] [--workers N] [--tenants FILE] [--json]
croupier verify [--shuffles N] [--seed S] [--ha] [--faults LIST] [--json]
croupier admin --master URL status|workers|apps|shuffles|tenants [--json]
croupier admin --master URL decommission WORKER_ID [--wait]
croupier secret FILE
croupier secret-public FILE
croupier spark jar|conf [--master URL] [--spark-jars DIR] [--tenant-token T] [--auth-secret-file FILE]

Every member command (master, worker, admin) and every command that starts a cluster
(local, demo, bench, verify) takes ``--secret-file FILE`` (or ``$CROUPIER_SECRET_FILE``):
the cluster secret that signs and checks requests (PROTOCOL §2.1, docs/guides/security.md), and
``--curve`` (ZeroMQ CURVE on every socket, its keys derived from that secret).

One module per command group in this package (``master``, ``worker``, ``admin``, ``local``,
``tools``, ``secret``, ``config``, ``spark``), each with ``ORDER`` (its place in ``--help``) and
``register(sub, root)`` (adds its sub-commands; each sets ``func``). Adding a command group is
adding one such module: ``build_parser`` finds it. What they share is in ``_common``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Sequence
from types import ModuleType

__all__ = ["build_parser", "main"]


def _groups() -> list[ModuleType]:
    """The command group modules of this package (every module not named ``_*``), in ``ORDER``."""
    modules = [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    ]
    return sorted(modules, key=lambda m: (m.ORDER, m.__name__))


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one sub-command (or a few) per command group module."""
    parser = argparse.ArgumentParser(prog="croupier", description="Croupier remote shuffle service")
    parser.add_argument("--log-level", default=os.environ.get("CROUPIER_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=os.environ.get("CROUPIER_LOG_FORMAT", "text"),
        help="json: one object per line with ts, level, logger, msg and worker_id/app_id/shuffle_id",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for group in _groups():
        group.register(sub, parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from croupier.ops.config import config_path, layer_argv, load_file

    if argv is None and threading.current_thread() is threading.main_thread():
        # a process started by ``LocalCluster`` inherits SIGINT and SIGTERM blocked (held while
        # it was spawned): take them again, or this process would never act on them
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    try:  # --config FILE and CROUPIER_<COMMAND>_<FLAG> under the command line's own flags
        path = config_path(given, os.environ)
        config = load_file(path) if path is not None else None
        layered = layer_argv(parser, given, config, os.environ)
    except ValueError as exc:
        print(f"croupier: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(layered.argv)
    args.config_file = config
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_format == "json":
        from croupier.ops.logs import JsonFormatter

        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    # kazoo logs every connection at INFO; keep it to warnings unless debugging
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("kazoo").setLevel(logging.WARNING)
    from croupier.core.errors import BY_STATUS, CroupierError

    try:
        result: int = args.func(args)
    except CroupierError as exc:
        # LogCorrupted and the like travel as INTERNAL; name the class too, operators search for it
        kind = exc.code if BY_STATUS.get(exc.status) is type(exc) else f"{exc.code} ({type(exc).__name__})"
        print(f"croupier {args.command}: {kind}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # a data directory or port the OS refused at start-up
        print(f"croupier {args.command}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"croupier {args.command}: {exc}", file=sys.stderr)
        return 2
    return result
