"""``App.register_shuffle`` carries a fresh request id per call, and a resend of the same call
(what the master client does after a lost reply or a failover) gets the same shuffle back."""

from __future__ import annotations

from typing import Any

import pytest

import croupier
from croupier.core.commands import RegisterApp, RegisterShuffle
from croupier.core.config import ClientConfig, MasterConfig
from croupier.core.errors import Unauthorized
from croupier.core.quotas import parse_tenants
from croupier.ha.eventlog import MemoryEventLog
from croupier.services.master import MasterService
from croupier.transports.master_client import MasterClient
from tests.sdk.fakes import FakeCluster
from tests.sdk.secure import SECRET


def test_a_resent_registration_is_one_shuffle_and_each_call_a_new_one(
    fake: FakeCluster, config: ClientConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    with croupier.connect(fake.master_url, config=config) as client:
        app = client.register_app("retry")
        master = client._master
        real = master.request
        sent: list[RegisterShuffle] = []

        def twice(command: Any, reply_type: Any) -> Any:
            if isinstance(command, RegisterShuffle):
                sent.append(command)
                real(command, reply_type)  # the first reply is "lost": the client sends again
            return real(command, reply_type)

        monkeypatch.setattr(master, "request", twice)
        first = app.register_shuffle(num_mappers=1, num_partitions=4)
        second = app.register_shuffle(num_mappers=1, num_partitions=4)
        assert (first.shuffle_id, second.shuffle_id) == (0, 1)
        assert len(client.status()["shuffles"]) == 2
        ids = [cmd.request_id for cmd in sent]
        assert None not in ids and len(set(ids)) == 2
        app.unregister()


TENANTS = '[tenants.team]\ntoken = "team-token-1"'


def test_the_tenant_token_reaches_the_master_and_its_refusal_is_not_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unsigned ``REGISTER_APP`` with an id kept its tenant token out of the master's check
    (every SDK registration was refused on a master with tenants), and the SDK took that
    refusal for a lost reply: it warned and registered another id."""
    config = MasterConfig(tenants=parse_tenants(TENANTS))
    log = MemoryEventLog()
    with MasterService("tcp://127.0.0.1:0", config=config, event_log=log, secret=SECRET) as master:
        with croupier.connect(master.url, tenant_token="team-token-1") as client:
            app = client.register_app("job")
            app.unregister()
        with (
            croupier.connect(master.url, tenant_token="team-token-wrong") as client,
            pytest.raises(Unauthorized, match="not one of"),
        ):
            client.register_app("job")
        assert "key was lost" not in caplog.text
        with MasterClient(master.url, attempts=1) as raw:  # unsigned
            raw.call(RegisterApp("job", "job-1", tenant_token="team-token-1"))
            with pytest.raises(Unauthorized, match="a repeat must be signed") as refused:
                raw.call(RegisterApp("job", "job-1", tenant_token="team-token-1"))
            assert refused.value.details == {"app_id": "job-1"}  # what the SDK retries on
