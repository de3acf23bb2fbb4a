"""Tenants and their quotas: the ``--tenants`` file, tenant tokens, usage and the checks.

Pure: no I/O (the service reads the file and passes its text to ``parse_tenants``).

A tenant is a name, a token and four quotas, each a limit or unlimited (None):

    shuffles          live (registered, not unregistered) shuffles of the tenant's apps
    partitions        the sum of ``num_partitions`` of those shuffles
    bytes_in_flight   bytes pushed to those shuffles not yet committed (primary copies, as the
                      workers report them in WORKER_HEARTBEAT ``pushed``: soft state)
    bytes_stored      ``total_bytes`` of those shuffles that are committed, plus the sizes of
                      their copies in the object store (``CopiesOffloaded``, issue 26)

They are checked at REGISTER_SHUFFLE (``check_shuffle``), as Celeborn checks its quotas at
registration: a new shuffle is refused when it would take the tenant past its shuffles or
partitions quota, or when the tenant's bytes in flight or bytes stored already reached
theirs. A running shuffle is never cut off: pushes and revives (which add a location, not
a partition) are not checked. An app's tenant is chosen at REGISTER_APP from its token
(``resolve_tenant``) and logged with the app (``AppRegistered.tenant``); the token never is.

Where a quota comes from, first found wins: the tenant's own table in the file, the file's
``[default]`` table, the master's default quotas (``MasterConfig.max_shuffles`` ... ``--max-shuffles`` ...).
Without a file, every app is tenant ``default`` and no token is asked for.
"""

from __future__ import annotations

import hmac
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from croupier.core.config import MasterConfig, parse_size
from croupier.core.errors import BadRequest, QuotaExceeded, Unauthorized
from croupier.core.ids import app_id
from croupier.core.replies import TenantRow
from croupier.core.state import MasterState

__all__ = [
    "DEFAULT_TENANT",
    "QUOTA_NAMES",
    "QuotaContext",
    "Quotas",
    "Tenant",
    "TenantTable",
    "Usage",
    "check_shuffle",
    "default_quotas",
    "parse_tenants",
    "resolve_tenant",
    "sum_pushed",
    "tenant_rows",
    "tenant_usage",
]

DEFAULT_TENANT = "default"
QUOTA_NAMES = ("shuffles", "partitions", "bytes_in_flight", "bytes_stored")
MAX_TOKEN_LENGTH = 256
MIN_TOKEN_LENGTH = 8
Pushed = Mapping[tuple[str, int], int]  # (app, shuffle) -> bytes pushed, summed over the workers


@dataclass(frozen=True, slots=True)
class Quotas:
    """Limits; None is unlimited (or, in the file, "not set here": the next source decides)."""

    shuffles: int | None = None
    partitions: int | None = None
    bytes_in_flight: int | None = None
    bytes_stored: int | None = None

    def over(self, fallback: Quotas) -> Quotas:
        """These limits, with ``fallback``'s where these are not set."""
        return Quotas(*(_first(getattr(self, q), getattr(fallback, q)) for q in QUOTA_NAMES))


def _first(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    token: str = field(repr=False)  # a secret: never logged
    quotas: Quotas = Quotas()


@dataclass(frozen=True, slots=True)
class TenantTable:
    """The parsed ``--tenants`` file: the tenants and the ``[default]`` quotas."""

    tenants: tuple[Tenant, ...]
    default: Quotas = Quotas()

    def by_token(self, token: str) -> Tenant | None:
        """The tenant whose token this is (compared in constant time), or None."""
        found = None
        for tenant in self.tenants:
            if hmac.compare_digest(tenant.token.encode(), token.encode()):
                found = tenant
        return found

    def quotas(self, name: str, fallback: Quotas) -> Quotas:
        """Tenant ``name``'s limits: its own, else ``[default]``'s, else ``fallback``'s."""
        own = next((t.quotas for t in self.tenants if t.name == name), Quotas())
        return own.over(self.default).over(fallback)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tenants)


@dataclass(frozen=True, slots=True)
class QuotaContext:
    """What ``decide`` needs for tenants: the table (None: no file), the master's default quotas,
    and the bytes the workers last reported pushed per (app, shuffle) (soft state)."""

    table: TenantTable | None = None
    defaults: Quotas = Quotas()
    pushed: Pushed = field(default_factory=dict)

    def limits(self, tenant: str) -> Quotas:
        return self.defaults if self.table is None else self.table.quotas(tenant, self.defaults)


@dataclass(frozen=True, slots=True)
class Usage:
    apps: int = 0
    shuffles: int = 0
    partitions: int = 0
    bytes_in_flight: int = 0
    bytes_stored: int = 0


# -- the file ------------------------------------------------------------------------------

_QUOTA_KEYS = {f"max_{q}": q for q in QUOTA_NAMES}


def parse_tenants(text: str) -> TenantTable:
    """Parse a tenants file (TOML)::

        [default]                       # optional: quotas of tenants that set none
        max_shuffles = 100
        max_bytes_stored = "100GiB"

        [tenants.etl]
        token = "a long random string"
        max_partitions = 50000
        max_bytes_in_flight = "8GiB"

    Raises:
        ValueError: not TOML, an unknown key, a bad name, token or limit, or a token
            used twice; the message names the place.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"tenants file is not TOML: {exc}") from exc
    extra = set(raw) - {"default", "tenants"}
    if extra:
        raise ValueError(f"tenants file: unknown tables {sorted(extra)} (expected [default], [tenants.NAME])")
    default = _quotas("[default]", _table(raw.get("default", {}), "[default]"), allow_token=False)
    tenants = []
    for name, body in _table(raw.get("tenants", {}), "[tenants]").items():
        where = f"[tenants.{name}]"
        try:
            app_id(name)
        except BadRequest as exc:
            raise ValueError(f"{where}: {exc}") from exc
        table = _table(body, where)
        token = table.get("token")
        if not isinstance(token, str) or not MIN_TOKEN_LENGTH <= len(token) <= MAX_TOKEN_LENGTH:
            size = f"{MIN_TOKEN_LENGTH}..{MAX_TOKEN_LENGTH}"
            raise ValueError(f"{where}: token must be a string of {size} characters")
        tenants.append(Tenant(name, token, _quotas(where, table, allow_token=True)))
    if len({t.token for t in tenants}) != len(tenants):
        raise ValueError("tenants file: two tenants have the same token")
    return TenantTable(tuple(tenants), default)


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table")
    return value


def _quotas(where: str, table: dict[str, Any], *, allow_token: bool) -> Quotas:
    known = set(_QUOTA_KEYS) | ({"token"} if allow_token else set())
    extra = set(table) - known
    if extra:
        raise ValueError(f"{where}: unknown keys {sorted(extra)} (known: {sorted(known)})")
    limits: dict[str, int] = {}
    for key, quota in _QUOTA_KEYS.items():
        if key in table:
            limits[quota] = _limit(f"{where} {key}", table[key], sized=quota.startswith("bytes"))
    return Quotas(**limits)


def _limit(where: str, value: Any, *, sized: bool) -> int:
    if sized and isinstance(value, str):
        value = parse_size(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        kind = "a size (bytes, or a string like '8GiB')" if sized else "an integer"
        raise ValueError(f"{where} must be {kind} >= 0, got {value!r}")
    return value


# -- tenants of apps, usage and the checks -------------------------------------------------


def resolve_tenant(table: TenantTable | None, token: str | None) -> str:
    """The tenant a REGISTER_APP with ``token`` belongs to.

    Raises:
        Unauthorized: the master has a tenants file and the token is missing or unknown.
    """
    if table is None:
        return DEFAULT_TENANT
    if not token:
        raise Unauthorized(
            "this master has tenants (--tenants): REGISTER_APP needs a tenant_token"
            " (croupier.connect(url, tenant_token=...) or CROUPIER_TENANT_TOKEN)"
        )
    tenant = table.by_token(token)
    if tenant is None:
        raise Unauthorized("the tenant token is not one of this master's tenants")
    return tenant.name


def tenant_usage(state: MasterState, pushed: Pushed) -> dict[str, Usage]:
    """Every tenant's usage, from the folded ``MasterState`` and the workers' ``pushed`` reports."""
    counts: dict[str, list[int]] = {}
    for app in state.apps.values():
        counts.setdefault(app.tenant, [0, 0, 0, 0, 0])[0] += 1
    for (app_id_, shuffle_id), info in state.shuffles.items():
        owner = state.apps.get(app_id_)
        if owner is None:  # pragma: no cover - the fold removes an app's shuffles with it
            continue
        row = counts.setdefault(owner.tenant, [0, 0, 0, 0, 0])
        row[1] += 1
        row[2] += info.num_partitions
        # the object store's copies count too (issue 26): uploaded after the commit
        row[4] += sum(entry[3] for entry in info.offloaded)
        if info.commit is not None:
            row[4] += info.commit.total_bytes
        else:
            row[3] += pushed.get((app_id_, shuffle_id), 0)
    return {name: Usage(*row) for name, row in counts.items()}


def check_shuffle(state: MasterState, app: str, num_partitions: int, ctx: QuotaContext) -> None:
    """Refuse a new shuffle of ``app`` with ``num_partitions`` partitions that its tenant's quotas
    do not allow (nothing for an unknown app: ``decide`` answers ``UNKNOWN_APP``).

    Raises:
        QuotaExceeded: details ``{"tenant", "quota", "limit", "usage"}``; the message names them.
    """
    info = state.apps.get(app)
    if info is None:
        return
    tenant = info.tenant
    limits = ctx.limits(tenant)
    if all(getattr(limits, q) is None for q in QUOTA_NAMES):
        return
    usage = tenant_usage(state, ctx.pushed).get(tenant, Usage())
    # (quota, usage, what this shuffle adds): counts must fit after it, bytes must be under before it
    for quota, used, adds in (
        ("shuffles", usage.shuffles, 1),
        ("partitions", usage.partitions, num_partitions),
        ("bytes_in_flight", usage.bytes_in_flight, 0),
        ("bytes_stored", usage.bytes_stored, 0),
    ):
        limit = getattr(limits, quota)
        if limit is None:
            continue
        if (used + adds > limit) if adds else (used >= limit):
            asked = f" and this shuffle adds {adds}" if adds else ""
            raise QuotaExceeded(
                f"tenant {tenant!r} is over its {quota} quota: the limit is {limit}, the usage is"
                f" {used}{asked}; unregister finished shuffles or apps, or ask the operator to raise"
                f" max_{quota}",
                {"tenant": tenant, "quota": quota, "limit": limit, "usage": used},
            )


def default_quotas(config: MasterConfig) -> Quotas:
    """The master's default quotas (its ``max_*`` settings)."""
    c = config
    return Quotas(c.max_shuffles, c.max_partitions, c.max_bytes_in_flight, c.max_bytes_stored)


def sum_pushed(by_worker: Mapping[str, Pushed]) -> dict[tuple[str, int], int]:
    """The workers' last ``pushed`` reports, summed per (app, shuffle)."""
    total: dict[tuple[str, int], int] = {}
    for report in by_worker.values():
        for key, nbytes in report.items():
            total[key] = total.get(key, 0) + nbytes
    return total


def tenant_rows(state: MasterState, ctx: QuotaContext) -> tuple[TenantRow, ...]:
    """STATUS ``tenants``: every tenant of the file and every tenant with an app, by name."""
    usage = tenant_usage(state, ctx.pushed)
    names = sorted(set(usage) | set(ctx.table.names if ctx.table else (DEFAULT_TENANT,)))
    rows = []
    for name in names:
        u, limits = usage.get(name, Usage()), ctx.limits(name)
        rows.append(
            TenantRow(
                name,
                *(u.apps, u.shuffles, u.partitions, u.bytes_in_flight, u.bytes_stored),
                *(limits.shuffles, limits.partitions, limits.bytes_in_flight, limits.bytes_stored),
            )
        )
    return tuple(rows)
