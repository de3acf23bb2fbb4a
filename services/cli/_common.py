"""What the command groups of ``croupier`` share: the cluster secret and CURVE flags, the
``--http``, quota and peer-reply flags, the table printer and the wait for a signal."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from croupier.ops.thread_names import name_os_threads

if TYPE_CHECKING:
    from croupier.transports.curve import CurveServer

log = logging.getLogger("croupier")

_Subparsers = argparse._SubParsersAction  # argparse has no public name for it


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


def _secret_env(args: argparse.Namespace) -> None:
    """local, demo, bench, verify: a given secret file goes to the cluster they start through the
    environment (``LocalCluster`` reads it); without one they create ``<data dir>/secret``."""
    from croupier.transports.secret import SECRET_ENV

    if args.secret_file:
        os.environ[SECRET_ENV] = str(Path(args.secret_file).resolve())


def _secret_file(args: argparse.Namespace) -> str | None:
    from croupier.transports.secret import secret_file_from_env

    return secret_file_from_env(args.secret_file)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While in it, a SIGTERM raises ``SystemExit`` (once), so that the ``with`` blocks of a
    command that starts processes (``local``, ``demo``, ``bench``, ``verify``) stop them; the
    default action ended the command at once and left them running. The handler before is
    put back on the way out. Off the main thread (a test calling ``main``) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up runs undisturbed
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _wait_for_signal(done: threading.Event | None = None) -> None:
    """Until SIGINT or SIGTERM, or until ``done`` is set (checked every half second). Meanwhile
    the process's threads get their OS names (``ops/thread_names.py``), every second.

    The service has started by now: what its start-up made (modules, classes, the HTTP
    app) moves to the collector's permanent generation, so that the collections the data
    path triggers no longer walk it (about 47,000 objects in a worker)."""
    gc.collect()
    gc.freeze()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    name_os_threads()
    while not stop.wait(NAMING_INTERVAL_S if done is None else 0.5):
        name_os_threads()  # the threads started since, e.g. a shuffle's actors
        if done is not None and done.is_set():
            return


def _member_curve(args: argparse.Namespace, secret: Any) -> CurveServer | None:
    """With ``--curve``: the CURVE key pair derived from the member's cluster secret (``_secret``)."""
    if not args.curve:
        return None
    from croupier.transports.curve import CurveServer

    return CurveServer.from_secret(secret)


def _add_curve_flags(p: argparse.ArgumentParser) -> None:
    """``--curve`` (each of these commands has ``--secret-file`` already)."""
    p.add_argument(
        "--curve",
        action="store_true",
        help="ZeroMQ CURVE on every socket, keys derived from the secret file (docs/guides/security.md)",
    )


NAMING_INTERVAL_S = 1.0  # how often a waiting server names its new threads
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


def _log_field(name: str, value: str) -> None:
    """Every JSON log line of this process carries ``name`` (``--log-format json``)."""
    from croupier.ops.logs import JsonFormatter

    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.fields[name] = value
