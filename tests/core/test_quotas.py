"""Tenants and quotas (croupier.core.quotas) as ``decide`` applies them: tokens, each quota, replay."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.codec import to_json
from croupier.core.decide import decide
from croupier.core.errors import QuotaExceeded, Unauthorized
from croupier.core.events import AppRegistered, Event, decode_event, encode_event
from croupier.core.quotas import QuotaContext, Quotas, parse_tenants, tenant_rows
from croupier.core.state import MasterState, apply

TENANTS = """
[default]
max_shuffles = 5

[tenants.etl]
token = "etl-secret-token"
max_partitions = 100
max_bytes_in_flight = "1kB"
max_bytes_stored = 2000

[tenants.adhoc]
token = "adhoc-secret-token"
max_shuffles = 1
"""


class Master:
    """decide + apply with a tenants context (the master actor's part, without the log)."""

    def __init__(self, ctx: QuotaContext) -> None:
        self.state = MasterState()
        self.rng = random.Random(3)
        self.ctx = ctx
        self.log: list[Event] = []
        for i in range(3):
            self(c.RegisterWorker(f"w{i}", f"h{i}", 1, 2, 3, 4, 1_000_000, "inc"))

    def __call__(self, cmd: c.Command) -> dict[str, Any]:
        reply, events = decide(self.state, cmd, 0.0, self.rng, quotas=self.ctx)
        for e in events:
            apply(self.state, e)
        self.log.extend(events)
        body: dict[str, Any] = to_json(reply)
        return body


@pytest.fixture
def master() -> Master:
    return Master(QuotaContext(parse_tenants(TENANTS)))


def _refusal(master: Master, cmd: c.Command) -> dict[str, Any]:
    with pytest.raises(QuotaExceeded) as err:
        master(cmd)
    details = err.value.details
    assert str(details["limit"]) in err.value.message and str(details["usage"]) in err.value.message
    assert details["quota"] in err.value.message and repr(details["tenant"]) in err.value.message
    return details


def test_the_file_parses_with_defaults_and_sizes() -> None:
    table = parse_tenants(TENANTS)
    assert table.names == ("etl", "adhoc")
    assert table.quotas("etl", Quotas()) == Quotas(5, 100, 1000, 2000)
    assert table.quotas("adhoc", Quotas(partitions=7)) == Quotas(1, 7, None, None)
    assert "secret" not in repr(table)  # tokens never reach a log line


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('[tenants.a]\ntoken = "short"', "token"),
        ('[tenants.a]\ntoken = "long-enough-1"\nmax_shufles = 1', "max_shufles"),
        ('[tenants.a]\ntoken = "long-enough-1"\n[tenants.b]\ntoken = "long-enough-1"', "same token"),
        ('[tenants.a]\ntoken = "long-enough-1"\nmax_bytes_stored = "lots"', "lots"),
        ('[tenants.a]\ntoken = "long-enough-1"\nmax_shuffles = -1', "max_shuffles"),
        ('[tenants."a b"]\ntoken = "long-enough-1"', "a b"),
        ("[default]\ntoken = 'x'", "token"),
        ("[other]", "other"),
        ("not toml [", "TOML"),
    ],
)
def test_a_bad_file_is_refused_with_the_place_named(text: str, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        parse_tenants(text)


def test_register_app_needs_a_token_with_a_tenants_file(master: Master) -> None:
    with pytest.raises(Unauthorized, match="tenant_token"):
        master(c.RegisterApp("job", "app1"))
    with pytest.raises(Unauthorized, match="not one of"):
        master(c.RegisterApp("job", "app1", tenant_token="etl-secret-tokem"))
    assert master.log[3:] == []  # (3 worker registrations) nothing logged for a refusal
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    assert master.state.apps["app1"].tenant == "etl"


def test_the_token_is_never_logged_nor_in_repr(master: Master) -> None:
    cmd = c.RegisterApp("job", "app1", tenant_token="etl-secret-token")
    assert "secret" not in repr(cmd)
    master(cmd)
    (event,) = master.log[3:]
    assert isinstance(event, AppRegistered) and len(event.key_tag) == 16
    assert event == AppRegistered("app1", "job", 0.0, "etl", event.key_tag)
    assert b"secret" not in encode_event(event) and b'"tenant":"etl"' in encode_event(event)
    assert "secret" not in json.dumps(master.state.to_json())


def test_a_repeat_registration_by_another_tenant_is_refused(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    assert master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))["app_id"] == "app1"
    with pytest.raises(Unauthorized, match="another tenant"):
        master(c.RegisterApp("job", "app1", tenant_token="adhoc-secret-token"))


def test_without_a_file_everyone_is_default_and_no_token_is_needed() -> None:
    m = Master(QuotaContext(None, Quotas(shuffles=1)))
    m(c.RegisterApp("job", "app1"))
    m(c.RegisterApp("job", "app2", tenant_token="ignored-without-a-file"))
    assert {a.tenant for a in m.state.apps.values()} == {"default"}
    m(c.RegisterShuffle("app1", 1, 4))
    details = _refusal(m, c.RegisterShuffle("app2", 1, 4))  # the quota is the tenant's, across apps
    assert details == {"tenant": "default", "quota": "shuffles", "limit": 1, "usage": 1}


def test_shuffles_quota(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="adhoc-secret-token"))
    master(c.RegisterShuffle("app1", 1, 4, request_id="r1"))
    details = _refusal(master, c.RegisterShuffle("app1", 1, 4))
    assert details == {"tenant": "adhoc", "quota": "shuffles", "limit": 1, "usage": 1}
    # a retry of the registration that went through is answered, not refused
    assert master(c.RegisterShuffle("app1", 1, 4, request_id="r1"))["shuffle_id"] == 0
    master(c.UnregisterShuffle("app1", 0))
    master(c.RegisterShuffle("app1", 1, 4))  # released


def test_partitions_quota_counts_the_new_shuffle(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    master(c.RegisterShuffle("app1", 1, 60))
    details = _refusal(master, c.RegisterShuffle("app1", 1, 41))
    assert details == {"tenant": "etl", "quota": "partitions", "limit": 100, "usage": 60}
    with pytest.raises(QuotaExceeded, match="and this shuffle adds 41"):
        master(c.RegisterShuffle("app1", 1, 41))
    master(c.RegisterShuffle("app1", 1, 40))  # exactly at the limit


def test_bytes_in_flight_quota_uses_the_workers_reports(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    master(c.RegisterShuffle("app1", 1, 4))
    master.ctx = QuotaContext(master.ctx.table, pushed={("app1", 0): 999, ("other", 0): 10**9})
    master(c.RegisterShuffle("app1", 1, 4))
    master.ctx = QuotaContext(master.ctx.table, pushed={("app1", 0): 600, ("app1", 1): 400})
    details = _refusal(master, c.RegisterShuffle("app1", 1, 4))
    assert details == {"tenant": "etl", "quota": "bytes_in_flight", "limit": 1000, "usage": 1000}


def test_bytes_stored_quota_counts_committed_shuffles(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    master(c.RegisterShuffle("app1", 1, 1))
    master(c.MapperEnd("app1", 0, 0, 0, 1, "AQ=="))
    master(c.ReportCommit("app1", 0, total_bytes=2500))
    # once committed, its bytes are stored, not in flight (a late worker report is ignored)
    master.ctx = QuotaContext(master.ctx.table, pushed={("app1", 0): 10**6})
    details = _refusal(master, c.RegisterShuffle("app1", 1, 1))
    assert details == {"tenant": "etl", "quota": "bytes_stored", "limit": 2000, "usage": 2500}
    rows = {r.tenant: r for r in tenant_rows(master.state, master.ctx)}
    assert (rows["etl"].bytes_stored, rows["etl"].bytes_in_flight, rows["etl"].max_bytes_stored) == (
        2500,
        0,
        2000,
    )
    assert rows["adhoc"].apps == 0 and rows["adhoc"].max_shuffles == 1


def test_bytes_in_the_object_store_count_in_bytes_stored(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="etl-secret-token"))
    master(c.RegisterShuffle("app1", 1, 1))
    master(c.MapperEnd("app1", 0, 0, 0, 1, "AQ=="))
    master(c.ReportCommit("app1", 0, total_bytes=1500))
    copies = ((0, 0, "primary", 1500, "0" * 64), (0, 0, "replica", 1500, "0" * 64))
    assert master(c.ReportOffload("w0", "app1", 0, copies))["changed"]
    assert not master(c.ReportOffload("w1", "app1", 0, copies[:1]))["changed"]  # recorded already
    rows = {r.tenant: r for r in tenant_rows(master.state, master.ctx)}
    assert rows["etl"].bytes_stored == 1500 + 3000
    details = _refusal(master, c.RegisterShuffle("app1", 1, 1))
    assert details["quota"] == "bytes_stored" and details["usage"] == 4500


def test_tenant_survives_replay_and_snapshot(master: Master) -> None:
    master(c.RegisterApp("job", "app1", tenant_token="adhoc-secret-token"))
    replayed = MasterState()
    for e in master.log:
        apply(replayed, decode_event(encode_event(e)))
    assert replayed.apps["app1"].tenant == "adhoc"
    assert MasterState.from_snapshot(replayed.snapshot_bytes()).apps["app1"].tenant == "adhoc"


def test_old_events_and_snapshots_decode_as_tenant_default() -> None:
    event = decode_event(b'{"e":"AppRegistered","v":1,"app_id":"a1","name":"job","at":1.0}')
    assert event == AppRegistered("a1", "job", 1.0, "default")
    state = apply(MasterState(), event)
    snapshot = state.to_json()
    del snapshot["apps"][0]["tenant"]
    assert MasterState.from_json(snapshot).apps["a1"].tenant == "default"


def test_heartbeat_pushed_is_validated() -> None:
    c.WorkerHeartbeat("w0", "inc", pushed=(("app1", 0, 10),)).validate()
    with pytest.raises(Exception, match="pushed lists at most"):
        c.WorkerHeartbeat("w0", "inc", pushed=tuple(("a", i, 1) for i in range(c.MAX_HELD + 1))).validate()
