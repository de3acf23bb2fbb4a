"""``croupier admin``: status, workers, apps, shuffles, tenants, latency, offload; decommission,
exclude and include a worker."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from croupier.core.codec import to_json
from croupier.core.config import parse_duration
from croupier.core.replies import ChangedReply, DecommissionReply, OffloadRow, StatusReply
from croupier.services.cli._common import (
    _QUOTA_FLAGS_USAGE,
    _add_curve_flags,
    _add_secret_flag,
    _member_curve,
    _secret,
    _Subparsers,
    _table,
)

if TYPE_CHECKING:
    from croupier.transports.master_client import MasterClient

ORDER = 20  # its place in ``croupier --help``
_DRAIN_POLL_S = 1.0  # admin decommission --wait: seconds between STATUS calls


def register(sub: _Subparsers[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    _add_admin(sub)
    _add_curve_flags(sub.choices["admin"])


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
            "offload",
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
    if args.action == "offload":  # progress and lag of the object store (issue 26)
        return _offload(status, as_json=args.json)
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


def _offload(status: StatusReply, *, as_json: bool) -> int:
    """``admin offload``: the totals, then the shuffles still pending, oldest commit first."""
    if status.offload is None:
        print("croupier admin offload: this master has no object store (--object-store)", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(to_json(status.offload), sort_keys=True))
        return 0
    print(_offload_line(status.offload))
    rows = [to_json(row) for row in status.offload.shuffles]
    columns = ["app_id", "shuffle_id", "committed_copies", "offloaded_copies", "pending_bytes", "lag_seconds"]
    if rows:
        print(_table(rows, columns))
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
    if status.offload is not None:
        lines.append(f"offload  {_offload_line(status.offload)}")
    return "\n".join(lines)


def _offload_line(o: OffloadRow) -> str:
    return (
        f"{o.offloaded_copies}/{o.committed_copies} committed copies in the object store,"
        f" {o.pending_copies} pending (~{o.pending_bytes / 2**20:.1f} MiB),"
        f" oldest pending {o.oldest_pending_seconds:.1f} s"
    )
