"""``App.register_shuffle`` carries a fresh request id per call, and a resend of the same call
(what the master client does after a lost reply or a failover) gets the same shuffle back."""

from __future__ import annotations

from typing import Any

import pytest

import croupier
from croupier.core.commands import RegisterShuffle
from croupier.core.config import ClientConfig
from tests.sdk.fakes import FakeCluster


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
