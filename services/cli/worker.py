"""``croupier worker``: one worker, its data directories and its flags."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

from croupier.core.config import WorkerConfig, parse_duration
from croupier.services.cli._common import (
    _add_curve_flags,
    _add_http_flag,
    _add_peer_reply_flag,
    _add_secret_flag,
    _default_data_dir,
    _http_listen,
    _log_field,
    _member_curve,
    _secret,
    _Subparsers,
    _wait_for_signal,
)

ORDER = 30  # its place in ``croupier --help``


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_worker(sub)
    _add_curve_flags(sub.choices["worker"])


def _add_worker(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("worker", help="run a worker")
    w.add_argument("--master", required=True)
    w.add_argument("--listen", default="127.0.0.1")
    w.add_argument("--dirs", default="", help="data directories, comma-separated (one flusher each)")
    add_worker_settings(w)
    _add_secret_flag(w, "the cluster secret, the master's (default: the default master data dir's)")
    _add_http_flag(w)
    w.set_defaults(func=cmd_worker)


def add_worker_settings(w: argparse.ArgumentParser) -> None:
    """The flags of a worker's ``WorkerConfig`` (``worker_config``): ``croupier worker``'s, and
    ``croupier local``'s for its workers."""
    w.add_argument("--memory", default="1GiB", help="buffered bytes before pushes are answered CONGESTED")
    w.add_argument("--slots", type=int, default=100_000)
    w.add_argument(
        "--heartbeat",
        default=None,
        help="seconds between heartbeats (default: 10s at most, and at most a third of the"
        " master's --worker-timeout, which it tells the worker)",
    )
    w.add_argument(
        "--fsync",
        action="store_true",
        help="fsync data files, indexes and directories at commit (default: rely on the replica)",
    )
    w.add_argument(
        "--flush-threshold",
        default=str(WorkerConfig().flush_threshold),
        help="a location's buffered bytes are written to disk at this size",
    )
    w.add_argument("--chunk-size", default=str(WorkerConfig().chunk_size), help="target size of fetch chunks")
    w.add_argument(
        "--partition-actors",
        type=int,
        default=WorkerConfig().partition_actors,
        help="actor threads that own the locations, each a shard of them (0 = one per location)",
    )
    w.add_argument(
        "--split-threshold",
        default="1GiB",
        help="a location's bytes past which writers move its partition to a new epoch (soft split)",
    )
    _add_peer_reply_flag(w, WorkerConfig().max_peer_reply_bytes)
    _add_throttle_flags(w)
    _add_memory_tier_flags(w)


def _add_memory_tier_flags(w: argparse.ArgumentParser) -> None:
    default = WorkerConfig()
    w.add_argument(
        "--memory-tier-max",
        default="1MiB",
        help="committed location copies up to this size are also served from memory (0 = off)",
    )
    w.add_argument(
        "--memory-tier-fraction",
        type=float,
        default=default.memory_tier_fraction,
        help="the most the memory tier holds, as a fraction of --memory (counted against it)",
    )


def _add_throttle_flags(w: argparse.ArgumentParser) -> None:
    default = WorkerConfig()
    w.add_argument(
        "--throttle-window",
        default=f"{default.throttle_window:g}s",
        help="abnormal-app throttling: each app's push rate is measured over this window (0 = off)",
    )
    w.add_argument(
        "--throttle-floor",
        default=f"{default.throttle_floor // 1000**2}MB",
        help="bytes per second an app must exceed to be throttled",
    )
    w.add_argument(
        "--throttle-z",
        type=float,
        default=default.throttle_z,
        help="z-score against the other apps' push rates an app must exceed to be throttled",
    )
    w.add_argument("--no-throttle", action="store_true", help="turn abnormal-app throttling off")
    w.add_argument(
        "--no-direct-io",
        action="store_true",
        help="write and read partition files through the page cache instead of O_DIRECT",
    )
    w.add_argument(
        "--disk-reserve",
        default="auto",
        help="free bytes each data directory keeps; below it the directory gets no new locations"
        " (auto: the smaller of 5GiB and 10%% of its filesystem)",
    )
    w.add_argument(
        "--object-store",
        default=None,
        metavar="s3://BUCKET/PREFIX",
        help="upload every committed copy there too (endpoint and credentials: the AWS_* variables)",
    )


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The ``WorkerConfig`` of ``croupier worker``'s flags."""
    from croupier.core.config import parse_size

    return WorkerConfig(
        heartbeat_interval=None if args.heartbeat is None else parse_duration(args.heartbeat),
        memory_cap=parse_size(args.memory),
        slots=args.slots,
        commit_fsync=args.fsync,
        partition_actors=args.partition_actors,
        flush_threshold=parse_size(args.flush_threshold),
        chunk_size=parse_size(args.chunk_size),
        max_peer_reply_bytes=parse_size(args.max_peer_reply_bytes),
        throttle_window=0.0 if args.no_throttle else parse_duration(args.throttle_window),
        throttle_floor=parse_size(args.throttle_floor),
        throttle_z=args.throttle_z,
        split_threshold=parse_size(args.split_threshold),
        memory_tier_max=parse_size(args.memory_tier_max),
        memory_tier_fraction=args.memory_tier_fraction,
        disk_reserve=None if args.disk_reserve in (None, "auto") else parse_size(args.disk_reserve),
        object_store=args.object_store,
        direct_io=not args.no_direct_io,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from croupier.ops.logs import held_logs

    # the worker id is the first line on stdout, so scripts can read it; the start-up's log
    # lines (stderr) wait for it, so that it is the first line of both captured together too
    with held_logs() as id_printed:
        return _serve_worker(args, id_printed)


def _serve_worker(args: argparse.Namespace, id_printed: Callable[[], None]) -> int:
    from croupier.ops.heap import keep_heap
    from croupier.services.worker import WorkerService

    dirs = [d for d in args.dirs.split(",") if d] or [str(Path(_default_data_dir()).parent / "worker")]
    config = worker_config(args)
    keep_heap(config.memory_cap)  # before the service's threads exist
    secret = _secret(args)
    curve = _member_curve(args, secret)
    http = _http_listen(args, args.listen)
    service = WorkerService(
        args.master, dirs, host=args.listen, config=config, curve=curve, secret=secret, http=http
    )
    _log_field("worker_id", service.worker_id)
    with service as worker:
        print(worker.worker_id, flush=True)
        id_printed()
        logging.getLogger("croupier").info("worker %s: %s, dirs %s", worker.worker_id, worker.urls, dirs)
        if worker.http is not None:
            logging.getLogger("croupier").info("worker %s: HTTP on %s", worker.worker_id, worker.http.url)
        _wait_for_signal(worker.drained)  # decommissioned and drained: exit 0
        if worker.drained.is_set():
            logging.getLogger("croupier").warning("worker %s drained; exiting", worker.worker_id)
    return 0
