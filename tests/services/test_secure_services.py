"""A master and a worker built with a cluster secret (PROTOCOL §2.1): who gets what."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core import commands as c
from croupier.core.codec import to_json
from croupier.core.config import MasterConfig, WorkerConfig
from croupier.core.dataplane import Destroy
from croupier.core.errors import Unauthorized, UnknownApp
from croupier.core.wire import MsgType
from croupier.services.master import MasterService
from croupier.services.worker import WorkerService
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from croupier.transports.secret import ClusterSecret

SECRET = ClusterSecret(bytes(range(32)))


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterService]:
    config = MasterConfig(sweep_interval=0, takeover_grace=0)
    with MasterService(
        "tcp://127.0.0.1:0", tmp_path / "m", config=config, rng=random.Random(1), secret=SECRET
    ) as m:
        yield m


def _client(master: MasterService, signer: Signer | None) -> MasterClient:
    return MasterClient(master.url, timeout=10, attempts=1, signer=signer)


def test_status_is_counts_only_unless_member_signed(master: MasterService) -> None:
    with _client(master, Signer.member(SECRET)) as member, _client(master, None) as anyone:
        member.call(c.RegisterWorker("w0", "127.0.0.1", 1, 2, 3, 4, 10, "i1"))
        app = str(anyone.call(c.RegisterApp("job"))["app_id"])
        full = member.call(c.Status())
        public = anyone.call(c.Status())
    assert [a["app_id"] for a in full["apps"]] == [app]
    assert public["counts"] == {
        "workers": 1,
        "active_workers": 1,
        "apps": 1,
        "shuffles": 0,
        "committed_shuffles": 0,
    }
    assert app not in str(public) and "w0" not in str(public)


def test_register_app_hands_out_the_key_once(master: MasterService) -> None:
    with _client(master, None) as anyone:
        reply = anyone.call(c.RegisterApp("job", "job-1"))
        key = bytes.fromhex(str(reply["app_key"]))
        assert key != SECRET.app_key("job-1") and "key_tag" not in reply  # keyed by this registration
        anyone.call(c.RegisterApp("job", "job-2"))
        with pytest.raises(Unauthorized):  # a repeat would hand the key to whoever asks
            anyone.call(c.RegisterApp("job", "job-1"))
        with pytest.raises(Unauthorized):  # app messages need the key
            anyone.call(c.GetShuffle("job-1", 0))
    app = Signer()
    app.add_app("job-1", key)
    app.add_app("job-3", key)
    with _client(master, app) as owner:
        assert owner.call(c.RegisterApp("job", "job-1"))["app_id"] == "job-1"  # its own retry
        assert owner.call(c.AppHeartbeat("job-1"))["app_id"] == "job-1"
        with pytest.raises(Unauthorized):  # its key is not another app's
            owner.call(c.AppHeartbeat("job-2"))
        with pytest.raises(UnknownApp):  # signed for an app that is not registered: said so
            owner.call(c.AppHeartbeat("job-3"))
        with pytest.raises(Unauthorized):  # nor a member's
            owner.call(c.LoseWorker("w0"))


def test_the_worker_registers_signed_and_refuses_the_unsigned(master: MasterService, tmp_path: Path) -> None:
    config = WorkerConfig(heartbeat_interval=0.2)
    with WorkerService(master.url, [tmp_path / "w"], config=config, secret=SECRET) as worker:
        with _client(master, Signer.member(SECRET)) as member:
            for _ in range(100):
                if member.call(c.Status())["workers"]:
                    break
                time.sleep(0.05)
            assert [w["worker_id"] for w in member.call(c.Status())["workers"]] == [worker.worker_id]
        body = to_json(Destroy("job-1", None))
        with RpcClient(worker.urls["control"], timeout=10, retries=0) as anyone:
            with pytest.raises(Unauthorized):
                anyone.call(MsgType.DESTROY, body)
            anyone.call(MsgType.PING)  # open
        with RpcClient(worker.urls["control"], timeout=10, retries=0, signer=Signer.member(SECRET)) as m:
            assert m.call(MsgType.DESTROY, body).body == {"removed": 0}


def test_the_sdk_registers_another_id_when_the_key_of_its_first_was_lost(
    master: MasterService, monkeypatch: pytest.MonkeyPatch
) -> None:
    import croupier

    with _client_of(master) as anyone:
        anyone.call(c.RegisterApp("job", "job-aaaaaaaaaa"))  # as if its reply had been lost
    tokens = iter(["aaaaaaaaaa", "bbbbbbbbbb"])
    monkeypatch.setattr("croupier._client.secrets.token_hex", lambda _n: next(tokens))
    with croupier.connect(master.url) as client:
        app = client.register_app("job")
        assert app.app_id == "job-bbbbbbbbbb"
        assert app.app_key is not None and len(app.app_key) == 32
        with pytest.raises(Unauthorized):  # an id the caller gives is not replaced
            client.register_app("job", app_id="job-aaaaaaaaaa")


def _client_of(master: MasterService) -> MasterClient:
    return MasterClient(master.url, timeout=10, attempts=1)
