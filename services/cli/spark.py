"""``croupier spark jar|conf``: the client jar for Spark, and the settings that make an application
shuffle through Croupier (README, Spark)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from croupier.services.cli._common import _Subparsers

ORDER = 65  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("spark", help="use Croupier as Spark's shuffle: the client jar and the settings")
    sp.add_argument(
        "action",
        choices=["jar", "conf"],
        help="jar: print the client jar's path (built with javac against Spark's jars when needed);"
        " conf: print the Spark settings for a Croupier cluster, one key=value a line",
    )
    sp.add_argument("--master", help="conf: the master's URL, tcp://HOST:PORT (required)")
    sp.add_argument("--spark-jars", help="Spark's jars/ folder (default $SPARK_HOME/jars, else pyspark's)")
    sp.add_argument("--tenant-token", help="conf: the tenant's token, when the master has a tenants file")
    sp.add_argument(
        "--auth-secret-file",
        help="conf: authenticate Spark RPC with this file (spark.authenticate): task binaries hold app keys",
    )
    sp.set_defaults(func=cmd_spark)


def cmd_spark(args: argparse.Namespace) -> int:
    if args.action == "jar":
        return cmd_spark_jar(args)
    if not args.master:
        print("croupier spark conf: --master URL is required", file=sys.stderr)
        return 2
    return cmd_spark_conf(args)


def cmd_spark_jar(args: argparse.Namespace) -> int:
    from croupier.spark import BuildError, jar_path

    try:
        print(jar_path(Path(args.spark_jars) if args.spark_jars else None))
    except BuildError as exc:
        print(f"croupier spark jar: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_spark_conf(args: argparse.Namespace) -> int:
    from croupier.spark import BuildError, settings

    try:
        conf = settings(
            args.master,
            tenant_token=args.tenant_token,
            auth_secret_file=args.auth_secret_file,
            spark_jars=Path(args.spark_jars) if args.spark_jars else None,
        )
    except BuildError as exc:
        print(f"croupier spark conf: {exc}", file=sys.stderr)
        return 1
    for key, value in conf.items():
        print(f"{key}={value}")
    return 0
