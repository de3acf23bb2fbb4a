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

Every member command (master, worker, admin) and every command that starts a cluster
(local, demo, bench, verify) takes ``--secret-file FILE`` (or ``$CROUPIER_SECRET_FILE``):
the cluster secret that signs and checks requests (PROTOCOL §2.1, README "Security"), and
``--curve`` (ZeroMQ CURVE on every socket, its keys derived from that secret).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from croupier.core.codec import to_json
from croupier.core.config import MasterConfig, WorkerConfig, parse_duration
from croupier.core.replies import ChangedReply, DecommissionReply, StatusReply

if TYPE_CHECKING:
    from croupier.transports.curve import CurveServer
    from croupier.transports.master_client import MasterClient

__all__ = ["main"]

log = logging.getLogger("croupier")
_DRAIN_POLL_S = 1.0  # admin decommission --wait: seconds between STATUS calls


def _default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "croupier" / "master")


def _secret(args: argparse.Namespace, data_dir: str | None = None) -> Any:
    """The cluster secret of a member command: ``--secret-file``, ``$CROUPIER_SECRET_FILE``, else
    ``<data_dir>/secret`` (created when missing; masters only), else the default master data
    dir's secret when it exists (a worker or admin on the master's machine).

    Raises:
        ValueError: there is none (exit code 2, with how to give one).
    """
    from croupier.transports.secret import ensure_secret_file, load_secret_file, secret_file_from_env

    given = secret_file_from_env(args.secret_file)
    if given:
        return load_secret_file(given)
    if data_dir is not None:
        path = Path(data_dir) / "secret"
        secret, created = ensure_secret_file(path)
        log.info(
            "%s the cluster secret %s; give it to workers and admin: --secret-file %s",
            "created" if created else "using",
            path,
            path,
        )
        return secret
    fallback = Path(_default_data_dir()) / "secret"
    if fallback.exists():
        return load_secret_file(fallback)
    raise ValueError(
        "no cluster secret: give --secret-file FILE or set CROUPIER_SECRET_FILE"
        " (a master creates <data-dir>/secret; `croupier secret FILE` makes a new one)"
    )


def _add_secret_flag(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--secret-file", default=None, metavar="FILE", help=f"{help_text} (or $CROUPIER_SECRET_FILE)"
    )


def cmd_secret(args: argparse.Namespace) -> int:
    from croupier.transports.secret import create_secret_file

    create_secret_file(args.file)
    print(Path(args.file).resolve(), flush=True)
    return 0


def _secret_env(args: argparse.Namespace) -> None:
    """local, demo, bench, verify: a given secret file goes to the cluster they start through the
    environment (``LocalCluster`` reads it); without one they create ``<data dir>/secret``."""
    from croupier.transports.secret import SECRET_ENV

    if args.secret_file:
        os.environ[SECRET_ENV] = str(Path(args.secret_file).resolve())


def _wait_for_signal(done: threading.Event | None = None) -> None:
    """Until SIGINT or SIGTERM, or until ``done`` is set (checked every half second).

    The service has started by now: what its start-up made (modules, classes, the HTTP
    app) moves to the collector's permanent generation, so that the collections the data
    path triggers no longer walk it (about 47,000 objects in a worker)."""
    gc.collect()
    gc.freeze()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600 if done is None else 0.5):
        if done is not None and done.is_set():
            return


def _member_curve(args: argparse.Namespace, secret: Any) -> CurveServer | None:
    """With ``--curve``: the CURVE key pair derived from the member's cluster secret (``_secret``)."""
    if not args.curve:
        return None
    from croupier.transports.curve import CurveServer

    return CurveServer.from_secret(secret)


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


def cmd_master(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.core.urls import parse_listen
    from croupier.services.master import MasterService

    config = MasterConfig(
        worker_timeout=parse_duration(args.worker_timeout),
        app_timeout=parse_duration(args.app_timeout),
        takeover_grace=parse_duration(args.grace),
        max_apps=args.max_apps,
        **_quota_settings(args),
        max_peer_reply_bytes=parse_size(args.max_peer_reply_bytes),
    )
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
        # the bound URL is the first line on stdout, so scripts can read it
        print(master.url, flush=True)
        logging.getLogger("croupier").info("data dir %s", data_dir)
        if master.http is not None:
            logging.getLogger("croupier").info("HTTP (metrics, API, status page) on %s", master.http.url)
        _wait_for_signal()
    return 0


_QUOTA_FLAGS = ("max_shuffles", "max_partitions", "max_bytes_in_flight", "max_bytes_stored")
_QUOTA_FLAGS_USAGE = ("shuffles", "partitions", "bytes_in_flight", "bytes_stored")


def _quota_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The MasterConfig fields of ``--tenants`` and the default quotas.

    Raises:
        OSError: the tenants file cannot be read. ValueError: it or a quota is malformed.
    """
    from croupier.core.config import parse_size
    from croupier.core.quotas import parse_tenants

    out: dict[str, Any] = {}
    if args.tenants:
        out["tenants"] = parse_tenants(Path(args.tenants).read_text(encoding="utf-8"))
        names = ", ".join(out["tenants"].names) or "(none)"
        logging.getLogger("croupier").info("tenants from %s: %s", args.tenants, names)
    for name in _QUOTA_FLAGS:
        value = getattr(args, name)
        if value is not None:
            out[name] = parse_size(value)
    return out


def _quota_argv(args: argparse.Namespace) -> list[str]:
    """``--tenants`` and the default quota flags given, as ``croupier master`` arguments."""
    argv = ["--tenants", str(Path(args.tenants).resolve())] if args.tenants else []
    for name in _QUOTA_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def _add_quota_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tenants",
        metavar="FILE",
        help="tenants file (TOML): tokens and quotas; REGISTER_APP then needs a tenant token",
    )
    p.add_argument("--max-shuffles", help="default quota: live shuffles per tenant (default unlimited)")
    p.add_argument("--max-partitions", help="default quota: partitions of live shuffles per tenant")
    p.add_argument("--max-bytes-in-flight", help="default quota: bytes pushed, not yet committed (SIZE)")
    p.add_argument("--max-bytes-stored", help="default quota: bytes of committed shuffles (SIZE)")


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def cmd_admin(args: argparse.Namespace) -> int:
    from croupier.core.commands import Status
    from croupier.transports.auth import Signer
    from croupier.transports.master_client import MasterClient

    secret = _secret(args)
    keys = _member_curve(args, secret)
    curve = keys.client() if keys is not None else None
    signer = Signer.member(secret)
    with MasterClient(
        args.master, timeout=parse_duration(args.timeout), attempts=3, curve=curve, signer=signer
    ) as client:
        if args.action in ("decommission", "exclude", "include"):
            return _admin_worker_action(client, args)
        status = client.request(Status(), StatusReply)
    return _admin_show(status, args)


def _admin_worker_action(client: MasterClient, args: argparse.Namespace) -> int:
    """``admin decommission|exclude|include WORKER_ID`` (``--wait`` follows a decommission)."""
    from croupier.core.commands import DecommissionWorker, ExcludeWorker

    if not args.target:
        print(f"croupier admin {args.action}: give a WORKER_ID", file=sys.stderr)
        return 2
    changed: ChangedReply | DecommissionReply
    if args.action == "decommission":
        changed = client.request(DecommissionWorker(args.target), DecommissionReply)
        if args.wait:
            return _follow_drain(client, args.target, changed, json_out=args.json)
    else:
        exclude = ExcludeWorker(args.target, excluded=args.action == "exclude")
        changed = client.request(exclude, ChangedReply)
    out = to_json(changed)
    print(json.dumps(out) if args.json else f"{args.action} {args.target}: {out}")
    return 0


def _admin_show(status: StatusReply, args: argparse.Namespace) -> int:
    """``admin status|tenants|latency|workers|apps|shuffles``, from one STATUS reply."""
    if args.action == "status":
        print(json.dumps(to_json(status), sort_keys=True) if args.json else _status_text(status))
        return 0
    if args.action == "tenants":
        tenants = [to_json(row) for row in status.tenants or ()]
        print(json.dumps(tenants, sort_keys=True) if args.json else _tenants_text(tenants))
        return 0
    if args.action == "latency":
        return _latency(status, parse_duration(args.timeout), as_json=args.json)
    if args.action == "workers":  # with each worker's HTTP port and disks, from its heartbeats
        http = (status.master.worker_http if status.master is not None else None) or {}
        table = [{**to_json(row), "http_port": http.get(row.worker_id)} for row in status.workers]
        _add_dirs(table, status)
        columns = ["worker_id", "host", "status", "excluded", "used_slots", "slots", "http_port"]
        columns += ["incarnation", "dirs"]
        print(json.dumps(table, sort_keys=True) if args.json else _table(table, columns))
        return 0
    rows, columns = {
        "apps": (status.apps, ["app_id", "name", "shuffles"]),
        "shuffles": (
            status.shuffles,
            ["app_id", "shuffle_id", "num_mappers", "num_partitions", "mappers_ended", "committed"],
        ),
    }[args.action]
    table = [to_json(row) for row in rows]
    print(json.dumps(table, sort_keys=True) if args.json else _table(table, columns))
    return 0


def _follow_drain(client: MasterClient, worker_id: str, reply: DecommissionReply, *, json_out: bool) -> int:
    """``admin decommission --wait``: print the worker's status and held slots whenever they
    change, until it is drained (0) or no longer decommissioning (1: lost, removed, restarted)."""
    import time

    from croupier.core.commands import Status

    last: tuple[str, int] | None = None
    status = str(reply.status)
    while status == "decommissioning":
        rows = [w for w in client.request(Status(), StatusReply).workers if w.worker_id == worker_id]
        status, used = (str(rows[0].status), rows[0].used_slots) if rows else ("removed", 0)
        if status != "decommissioning":
            break
        if (status, used) != last:
            note = {"worker_id": worker_id, "status": status, "used_slots": used}
            text = f"decommission {worker_id}: {status}, {used} slots still held by registered shuffles"
            print(json.dumps(note) if json_out else text, flush=True)
            last = (status, used)
        time.sleep(_DRAIN_POLL_S)
    ok = status == "drained"
    out = {"worker_id": worker_id, "status": status, "drained": ok}
    print(json.dumps(out) if json_out else f"decommission {worker_id}: {status}", flush=True)
    return 0 if ok else 1


def _add_dirs(table: list[dict[str, Any]], status: StatusReply) -> None:
    """Each worker row's ``dirs``: its data directories' free space and health, from its last
    heartbeat (``path free/total MiB ok|low|failed``, ``low``: free below the reserve)."""
    reported = (status.master.worker_dirs if status.master is not None else None) or {}
    for row in table:
        dirs = reported.get(row["worker_id"])
        if dirs is None:
            row["dirs"] = "?"
            continue
        shown = []
        for path, free, total, reserve, healthy in dirs:
            health = "failed" if not healthy else "low" if free < reserve else "ok"
            shown.append(f"{path} {free // 1024**2}/{total // 1024**2}MiB {health}")
        row["dirs"] = "; ".join(shown)


def _latency(status: StatusReply, timeout: float, *, as_json: bool) -> int:
    """Each worker's latency quantiles, read from its HTTP endpoint (``/api/v1/worker``)."""
    from croupier.ops.cli import latency_rows

    rows = latency_rows(status, timeout)
    if as_json:
        print(json.dumps(rows, sort_keys=True))
    else:
        print(_table(rows, ["worker_id", "push_ack", "replicate_ack", "fetch_chunk", "commit", "error"]))
    return 0


def _tenants_text(rows: list[dict[str, Any]]) -> str:
    """Each tenant's usage against its limits, ``used/limit`` (``-`` = unlimited)."""
    table = [
        {
            "tenant": r["tenant"],
            "apps": r["apps"],
            **{q: f"{r[q]}/{r.get('max_' + q, '-')}" for q in _QUOTA_FLAGS_USAGE},
        }
        for r in rows
    ]
    return _table(table, ["tenant", "apps", *_QUOTA_FLAGS_USAGE])


def _status_text(status: StatusReply) -> str:
    master = status.master
    lines = [
        f"master   {master.url if master else '?'}  role {master.role if master else '?'}  term {status.term}"
    ]
    if master is not None and master.leader is not None:
        lines.append(f"leader   {master.leader or '(none)'}")
        lines.append(f"followers {', '.join(master.followers or ()) or '(none)'}")
    if master is not None and master.http is not None:
        lines.append(f"http     {master.http}  (metrics, /api/v1, the status page)")
    log_kind = master.log if master is not None and master.log is not None else "?"
    lines.append(f"log      {log_kind} at seq {status.seq}")
    lines.append(
        f"cluster  {len(status.workers)} workers, {len(status.apps)} apps, {len(status.shuffles)} shuffles"
    )
    return "\n".join(lines)


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The ``WorkerConfig`` of ``croupier worker``'s flags."""
    from croupier.core.config import parse_size

    return WorkerConfig(
        heartbeat_interval=parse_duration(args.heartbeat),
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
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from croupier.services.worker import WorkerService

    dirs = [d for d in args.dirs.split(",") if d] or [str(Path(_default_data_dir()).parent / "worker")]
    config = worker_config(args)
    secret = _secret(args)
    curve = _member_curve(args, secret)
    http = _http_listen(args, args.listen)
    service = WorkerService(
        args.master, dirs, host=args.listen, config=config, curve=curve, secret=secret, http=http
    )
    _log_field("worker_id", service.worker_id)
    with service as worker:
        # the worker id is the first line on stdout, so scripts can read it
        print(worker.worker_id, flush=True)
        logging.getLogger("croupier").info("worker %s: %s, dirs %s", worker.worker_id, worker.urls, dirs)
        if worker.http is not None:
            logging.getLogger("croupier").info("worker %s: HTTP on %s", worker.worker_id, worker.http.url)
        _wait_for_signal(worker.drained)  # decommissioned and drained: exit 0
        if worker.drained.is_set():
            logging.getLogger("croupier").warning("worker %s drained; exiting", worker.worker_id)
    return 0


def _log_field(name: str, value: str) -> None:
    """Every JSON log line of this process carries ``name`` (``--log-format json``)."""
    from croupier.ops.logs import JsonFormatter

    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.fields[name] = value


def cmd_local(args: argparse.Namespace) -> int:
    from croupier.ha.zkserver import ZooKeeperNotInstalled

    try:
        return _run_local(args)
    except ZooKeeperNotInstalled as exc:
        print(f"croupier local --ha: {exc}", file=sys.stderr)
        return 2


def _run_local(args: argparse.Namespace) -> int:
    from croupier.services.local import LocalCluster

    _secret_env(args)
    with LocalCluster(
        args.workers,
        args.data_dir,
        processes=True,
        ha=args.ha,
        master_args=_quota_argv(args),
        curve=args.curve,
    ) as cluster:
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


def cmd_demo(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.tools.demo import main_demo

    if args.mappers < 1 or args.partitions < 1 or args.workers < 2:
        print("croupier demo: needs --mappers >= 1, --partitions >= 1 and --workers >= 2", file=sys.stderr)
        return 2
    _secret_env(args)
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


def cmd_bench(args: argparse.Namespace) -> int:
    from croupier.core.config import parse_size
    from croupier.tools.bench import main_bench

    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    _secret_env(args)

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


def cmd_verify(args: argparse.Namespace) -> int:
    from croupier.tools.verify import main_verify

    _secret_env(args)
    return main_verify(
        args.shuffles,
        args.seed,
        ha=args.ha,
        faults=args.faults,
        as_json=args.json,
        curve=args.curve,
        secret_file=_secret_file(args),
    )


def _secret_file(args: argparse.Namespace) -> str | None:
    from croupier.transports.secret import secret_file_from_env

    return secret_file_from_env(args.secret_file)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one sub-command per ``_add_*`` helper below."""
    parser = argparse.ArgumentParser(prog="croupier", description="Croupier remote shuffle service")
    parser.add_argument("--log-level", default=os.environ.get("CROUPIER_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=os.environ.get("CROUPIER_LOG_FORMAT", "text"),
        help="json: one object per line with ts, level, logger, msg and worker_id/app_id/shuffle_id",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_master,
        _add_admin,
        _add_worker,
        _add_local,
        _add_demo,
        _add_bench,
        _add_verify,
        _add_secret,
        _add_spark,
    ):
        add(sub)
    for name in ("master", "admin", "worker", "local", "demo", "bench", "verify"):
        _add_curve_flags(sub.choices[name])
    _add_secret_public(sub)
    _add_config(sub, parser)
    return parser


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


def _add_curve_flags(p: argparse.ArgumentParser) -> None:
    """``--curve`` (each of these commands has ``--secret-file`` already)."""
    p.add_argument(
        "--curve",
        action="store_true",
        help="ZeroMQ CURVE on every socket, keys derived from the secret file (README Security)",
    )


def _add_secret_public(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("secret-public", help="print the cluster's CURVE public key (for SDK clients)")
    s.add_argument("file", nargs="?", help="the secret file (default $CROUPIER_SECRET_FILE)")
    s.set_defaults(func=cmd_secret_public)


_Subparsers = argparse._SubParsersAction  # argparse has no public name for it


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
    _add_peer_reply_flag(m, MasterConfig().max_peer_reply_bytes)
    _add_secret_flag(m, "the cluster secret (default: <data-dir>/secret, created; required with --ha)")
    _add_http_flag(m)
    m.set_defaults(func=cmd_master)


def _add_http_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        help="HOST:PORT of the HTTP endpoint (/metrics, /api/v1, the master's status page);"
        " default: the --listen host, a free port; 'off' = none. No credentials: guard it like an admin port",
    )


def _http_listen(args: argparse.Namespace, listen_host: str) -> str | None:
    """``--http``: None when off; the listen host and port 0 when not given."""
    if args.http is None:
        return f"{listen_host}:0"
    return None if args.http == "off" else str(args.http)


def _add_peer_reply_flag(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--max-peer-reply-bytes",
        default=str(default),
        help="bytes of replies one client may leave unread before its requests wait",
    )


def _add_admin(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    a = sub.add_parser("admin", help="inspect and operate a cluster")
    a.add_argument("--master", required=True, help="tcp://host:port[,...] or zk://hosts/root")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.add_argument("--timeout", default="10s")
    a.add_argument(
        "action",
        choices=[
            "status",
            "workers",
            "apps",
            "shuffles",
            "tenants",
            "latency",
            "decommission",
            "exclude",
            "include",
        ],
    )
    a.add_argument("target", nargs="?", help="WORKER_ID for decommission/exclude/include")
    _add_secret_flag(a, "the cluster secret: admin signs as a member")
    a.add_argument(
        "--wait",
        action="store_true",
        help="decommission: follow the worker until it is drained (exit 0), or leaves otherwise (exit 1)",
    )
    a.set_defaults(func=cmd_admin)


def _add_worker(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    w = sub.add_parser("worker", help="run a worker")
    w.add_argument("--master", required=True)
    w.add_argument("--listen", default="127.0.0.1")
    w.add_argument("--dirs", default="", help="data directories, comma-separated (one flusher each)")
    w.add_argument("--memory", default="1GiB", help="buffered bytes before pushes are answered CONGESTED")
    w.add_argument("--slots", type=int, default=100_000)
    w.add_argument("--heartbeat", default="10s")
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
    _add_secret_flag(w, "the cluster secret, the master's (default: the default master data dir's)")
    _add_memory_tier_flags(w)
    _add_http_flag(w)
    w.set_defaults(func=cmd_worker)


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
        "--disk-reserve",
        default="auto",
        help="free bytes each data directory keeps; below it the directory gets no new locations"
        " (auto: the smaller of 5GiB and 10%% of its filesystem)",
    )


def _add_local(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    loc = sub.add_parser("local", help="a master and N workers in the foreground")
    loc.add_argument("--workers", type=int, default=3)
    loc.add_argument("--data-dir", help="where data and logs go (default: a temporary directory)")
    loc.add_argument("--ha", action="store_true")
    _add_quota_flags(loc)
    _add_secret_flag(loc, "the cluster secret (default: <data-dir>/secret, created)")
    loc.set_defaults(func=cmd_local)


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
        " leader (--ha); phases: mid-push, after-close, during-commit, after-commit, mid-read"
        " (default: every kind that applies)",
    )
    v.add_argument("--json", action="store_true", help="end with one JSON line (the matrix and totals)")
    _add_secret_flag(v, "the cluster secret (default: one created under the run's directory)")
    v.set_defaults(func=cmd_verify)


def _add_secret(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("secret", help="create a new cluster secret file (mode 0600) and print its path")
    s.add_argument("file", help="where to write it (it must not exist)")
    s.set_defaults(func=cmd_secret)


def _add_spark(sub: _Subparsers[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("spark", help="use Croupier as Spark's shuffle: the client jar and the settings")
    group = sp.add_subparsers(dest="spark_command", required=True)
    j = group.add_parser("jar", help="print the client jar's path (built with javac against Spark's jars)")
    j.add_argument("--spark-jars", help="Spark's jars/ folder (default $SPARK_HOME/jars, else pyspark's)")
    j.set_defaults(func=cmd_spark_jar)
    c = group.add_parser("conf", help="print the Spark settings for a Croupier cluster, one key=value a line")
    c.add_argument("--master", required=True, help="the master's URL, tcp://HOST:PORT")
    c.add_argument("--spark-jars", help="Spark's jars/ folder (default $SPARK_HOME/jars, else pyspark's)")
    c.add_argument("--tenant-token", help="the tenant's token, when the master has a tenants file")
    c.add_argument(
        "--auth-secret-file",
        help="authenticate Spark's own RPC with this file (spark.authenticate): task binaries carry app keys",
    )
    c.set_defaults(func=cmd_spark_conf)


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


def main(argv: Sequence[str] | None = None) -> int:
    from croupier.ops.config import config_path, layer_argv, load_file

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


if __name__ == "__main__":
    sys.exit(main())
