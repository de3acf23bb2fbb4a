"""``croupier master``: one master, or a member of a ZooKeeper ensemble with ``--ha``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from croupier.core.config import MasterConfig, parse_duration
from croupier.services.cli._common import (
    _add_curve_flags,
    _add_http_flag,
    _add_peer_reply_flag,
    _add_quota_flags,
    _add_secret_flag,
    _default_data_dir,
    _http_listen,
    _member_curve,
    _quota_settings,
    _secret,
    _Subparsers,
    _wait_for_signal,
)

ORDER = 10  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_master(sub)
    _add_curve_flags(sub.choices["master"])


def _add_master(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("master", help="run a master")
    m.add_argument("--listen", default="127.0.0.1:9097", help="HOST:PORT (port 0 = any free port)")
    m.add_argument("--data-dir", help=f"event log directory (default {_default_data_dir()})")
    m.add_argument("--ha", help="zk://HOSTS/ROOT: join a ZooKeeper master ensemble")
    m.add_argument("--session-timeout", default="4s", help="ZooKeeper session timeout (with --ha)")
    m.add_argument("--worker-timeout", default="120s", help="declare a silent worker lost after this")
    m.add_argument("--app-timeout", default="300s", help="expire a silent app after this")
    m.add_argument("--grace", default="30s", help="no worker or app is declared lost this soon after start")
    m.add_argument(
        "--max-apps",
        type=int,
        default=MasterConfig().max_apps,
        help="live apps at most (one thread each); more get QUOTA_EXCEEDED",
    )
    _add_quota_flags(m)
    m.add_argument(
        "--object-store",
        default=None,
        metavar="s3://BUCKET/PREFIX",
        help="the workers' object store: the master deletes unregistered and expired apps' objects"
        " there (even with no worker left) and sweeps the objects of apps it does not know",
    )
    m.add_argument(
        "--orphan-grace",
        default="1h",
        help="the sweep leaves an unknown app's objects alone until the newest is this old",
    )
    m.add_argument("--orphan-interval", default="10min", help="how often to sweep for orphans (0: never)")
    _add_peer_reply_flag(m, MasterConfig().max_peer_reply_bytes)
    _add_secret_flag(m, "the cluster secret (default: <data-dir>/secret, created; required with --ha)")
    _add_http_flag(m)
    m.set_defaults(func=cmd_master)


def cmd_master(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.ops.logs import held_logs
    from croupier.services._lifecycle import master_switch_interval

    master_switch_interval()  # this process runs only the master (issue 27)

    config = MasterConfig(
        worker_timeout=parse_duration(args.worker_timeout),
        app_timeout=parse_duration(args.app_timeout),
        takeover_grace=parse_duration(args.grace),
        max_apps=args.max_apps,
        **_quota_settings(args),
        max_peer_reply_bytes=parse_size(args.max_peer_reply_bytes),
        object_store=args.object_store,
        orphan_grace=parse_duration(args.orphan_grace),
        orphan_interval=parse_duration(args.orphan_interval),
    )
    # the bound URL is the first line on stdout, so scripts can read it; the start-up's log
    # lines (stderr) wait for it, so that it is the first line of both captured together too
    with held_logs() as url_printed:
        return _serve_master(args, config, url_printed)


def _serve_master(args: argparse.Namespace, config: MasterConfig, url_printed: Callable[[], None]) -> int:
    from croupier.core.urls import parse_listen
    from croupier.services.master import MasterService

    if args.ha:
        from croupier.services.ha_master import HaMasterService

        # every member of an ensemble needs the same secret: it is given, never made here
        secret = _secret(args)
        with HaMasterService(
            parse_listen(args.listen),
            args.ha,
            config=config,
            session_timeout=parse_duration(args.session_timeout),
            curve=_member_curve(args, secret),
            secret=secret,
            http=_http_listen(args, parse_listen(args.listen).removeprefix("tcp://").rpartition(":")[0]),
        ) as member:
            print(member.url, flush=True)
            url_printed()
            if member.http is not None:
                logging.getLogger("croupier").info("HTTP (metrics, API, status page) on %s", member.http.url)
            _wait_for_signal()
        return 0
    data_dir = args.data_dir or _default_data_dir()
    secret = _secret(args, data_dir)
    curve = _member_curve(args, secret)
    listen = parse_listen(args.listen)
    http = _http_listen(args, listen.removeprefix("tcp://").rpartition(":")[0])
    with MasterService(listen, data_dir, config=config, curve=curve, secret=secret, http=http) as master:
        print(master.url, flush=True)
        url_printed()
        logging.getLogger("croupier").info("data dir %s", data_dir)
        if master.http is not None:
            logging.getLogger("croupier").info("HTTP (metrics, API, status page) on %s", master.http.url)
        _wait_for_signal()
    return 0
