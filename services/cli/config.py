"""``croupier --config FILE`` and ``croupier config show COMMAND``: the effective settings."""

from __future__ import annotations

import argparse
import json
import os

from croupier.services.cli._common import _Subparsers, _table

ORDER = 90  # its place in ``croupier --help``: last, it shows the others' flags


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_config(sub, root)


def _add_config(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    root.add_argument(
        "--config",
        help="a TOML file: a table per command ([master], [worker], ...), keys = flag names;"
        " $CROUPIER_<COMMAND>_<FLAG> overrides it, the command line both (default $CROUPIER_CONFIG)",
    )
    c = sub.add_parser("config", help="show the effective settings of a command and where each came from")
    c.add_argument("action", choices=["show"])
    c.add_argument("target", help="the command: master, worker, local, ...")
    c.add_argument("--config", dest="config_here", help="the config file (as croupier --config FILE)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=lambda args: cmd_config(args, root))


def cmd_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from croupier.ops.config import load_file, show

    config = load_file(args.config_here) if args.config_here else args.config_file
    rows = show(parser, args.target, config, os.environ)
    if args.json:
        print(json.dumps([{"flag": f, "value": v, "source": src} for f, v, src in rows], default=str))
    else:
        print(
            _table(
                [{"flag": f, "value": v, "source": src} for f, v, src in rows], ["flag", "value", "source"]
            )
        )
    return 0
