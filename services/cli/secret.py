"""``croupier secret`` and ``secret-public``: make a cluster secret, print its CURVE public key."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from croupier.services.cli._common import _Subparsers

ORDER = 60  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_secret(sub)
    _add_secret_public(sub)


def _add_secret(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("secret", help="create a new cluster secret file (mode 0600) and print its path")
    s.add_argument("file", help="where to write it (it must not exist)")
    s.set_defaults(func=cmd_secret)


def cmd_secret(args: argparse.Namespace) -> int:
    from croupier.transports.secret import create_secret_file

    create_secret_file(args.file)
    print(Path(args.file).resolve(), flush=True)
    return 0


def _add_secret_public(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("secret-public", help="print the cluster's CURVE public key (for SDK clients)")
    s.add_argument("file", nargs="?", help="the secret file (default $CROUPIER_SECRET_FILE)")
    s.set_defaults(func=cmd_secret_public)


def cmd_secret_public(args: argparse.Namespace) -> int:
    """Print the cluster's CURVE public key (Z85): what SDK clients need with ``--curve``."""
    from croupier.transports.curve import CurveServer
    from croupier.transports.secret import load_secret_file, secret_file_from_env

    path = secret_file_from_env(args.file)
    if path is None:
        print("croupier secret-public: give FILE or set $CROUPIER_SECRET_FILE", file=sys.stderr)
        return 2
    print(CurveServer.from_secret(load_secret_file(path)).public.decode())
    return 0
