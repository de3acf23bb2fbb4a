"""``croupier demo``, ``bench`` and ``verify``: the tools that start an embedded cluster and
measure or check it (their code lives in ``tools/``)."""

from __future__ import annotations

import argparse
import sys

from croupier.services.cli._common import (
    _add_curve_flags,
    _add_secret_flag,
    _quota_argv,
    _secret_env,
    _secret_file,
    _Subparsers,
    sigterm_unwinds,
)

ORDER = 50  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    for add in (_add_demo, _add_bench, _add_verify):
        add(sub)
    for name in ("demo", "bench", "verify"):
        _add_curve_flags(sub.choices[name])


def _add_demo(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("demo", help="run a verified shuffle on an embedded cluster")
    d.add_argument("--size", default="256MiB")
    d.add_argument("--mappers", type=int, default=8)
    d.add_argument("--partitions", type=int, default=64)
    d.add_argument("--workers", type=int, default=3)
    d.add_argument(
        "--tenants",
        metavar="FILE",
        help="run the embedded master with this tenants file (the token: CROUPIER_TENANT_TOKEN)",
    )
    d.add_argument("--json", action="store_true")
    _add_secret_flag(d, "the cluster secret (default: one created under the demo's directory)")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.tools.demo import main_demo

    if args.mappers < 1 or args.partitions < 1 or args.workers < 2:
        print("croupier demo: needs --mappers >= 1, --partitions >= 1 and --workers >= 2", file=sys.stderr)
        return 2
    _secret_env(args)
    with sigterm_unwinds():  # the clusters it starts are stopped
        return main_demo(
            parse_size(args.size),
            args.mappers,
            args.partitions,
            args.workers,
            args.json,
            _quota_argv(args),
            curve=args.curve,
            secret_file=_secret_file(args),
        )


def _add_bench(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("bench", help="benchmarks, side by side in one run")
    b.add_argument(
        "--scenarios",
        default="raw,ceiling,ceiling-tuned,scale,control",
        help="comma-separated: raw, ceiling, ceiling-tuned, scale, dask, control, actors, reads, throttle,"
        " curve, small-reads, metrics",
    )
    b.add_argument("--size", default="256MiB", help="bytes per data-plane run")
    b.add_argument("--mappers", type=int, default=8)
    b.add_argument("--workers", type=int, default=3)
    b.add_argument("--partitions", type=int, default=64, help="partitions of the raw scenario")
    b.add_argument("--batch-size", default="0", help="client push buffer for raw (0 = the default 64KiB)")
    b.add_argument("--plot", metavar="PNG", help="write the scale curve to this PNG file (needs matplotlib)")
    b.add_argument("--ha", action="store_true", help="also measure with a local ZooKeeper")
    b.add_argument("--runs", type=int, default=3)
    b.add_argument("--commands", type=int, default=20_000)
    b.add_argument("--clients", type=int, default=4)
    b.add_argument("--json", action="store_true")
    _add_secret_flag(b, "the cluster secret (default: one created under each run's directory)")
    b.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.tools.bench import main_bench

    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    _secret_env(args)

    with sigterm_unwinds():  # the clusters it starts are stopped
        return main_bench(
            scenarios,
            ha=args.ha,
            runs=args.runs,
            commands=args.commands,
            clients=args.clients,
            as_json=args.json,
            size=parse_size(args.size),
            mappers=args.mappers,
            workers=args.workers,
            partitions=args.partitions,
            push_buffer=parse_size(args.batch_size),
            plot=args.plot,
            curve=args.curve,
            secret_file=_secret_file(args),
        )


def _add_verify(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    v = sub.add_parser("verify", help="verified shuffles on an embedded cluster under a seeded nemesis")
    v.add_argument("--shuffles", type=int, default=20, help="how many shuffles, one fault each")
    v.add_argument("--seed", type=int, default=1, help="seeds the fault schedule (same seed, same faults)")
    v.add_argument(
        "--ha", action="store_true", help="a local ZooKeeper and 3 masters (adds the leader fault)"
    )
    v.add_argument(
        "--faults",
        default="",
        help="comma list of KIND or KIND@PHASE; kinds: kill, restart, pause, corrupt, corrupt-both,"
        " leader (--ha), disk-full (root), double-kill, all-gone (--object-store); phases: mid-push,"
        " after-close, during-commit, after-commit, mid-read (default: every kind that applies but"
        " disk-full, double-kill and all-gone)",
    )
    v.add_argument(
        "--object-store",
        default=None,
        metavar="s3://BUCKET/PREFIX",
        help="the workers offload there and readers fall back to it (endpoint and credentials:"
        " the AWS_* variables); the all-gone fault needs it",
    )
    v.add_argument("--json", action="store_true", help="end with one JSON line (the matrix and totals)")
    _add_secret_flag(v, "the cluster secret (default: one created under the run's directory)")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from croupier.tools.verify import main_verify

    _secret_env(args)
    with sigterm_unwinds():  # the clusters it starts are stopped
        return main_verify(
            args.shuffles,
            args.seed,
            ha=args.ha,
            faults=args.faults,
            as_json=args.json,
            curve=args.curve,
            secret_file=_secret_file(args),
            object_store=args.object_store,
        )
