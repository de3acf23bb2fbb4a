"""Workers keep only what the master placed on them (real processes): an unplaced push or a
batch with a bad digest is refused and stores nothing; the files of an app the master no
longer knows (its DESTROY never reached the worker) are deleted when the worker restarts."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier.core import commands as c
from croupier.core.batch import BatchHeader
from croupier.core.codec import from_json, to_json
from croupier.core.dataplane import CommitFiles, CommitFilesReply, Push, ReplicaTarget, WorkerInfoReply
from croupier.core.errors import BadRequest, StaleLocation
from croupier.core.wire import MsgType
from croupier.services.local import LocalCluster
from croupier.transports.auth import Signer
from croupier.transports.digest import batch_digest
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient

pytestmark = pytest.mark.integration


def _url(address: dict[str, Any], port: str) -> str:
    return f"tcp://{address['host']}:{address[port]}"


def _placed(cluster: LocalCluster) -> tuple[str, int, dict[str, Any], dict[str, Any]]:
    """A registered shuffle and partition 0's epoch-0 primary and replica addresses."""
    with MasterClient(cluster.master_url, signer=Signer.member(cluster.secret)) as master:
        app = master.call(c.RegisterApp("placement"))["app_id"]
        sid = master.call(c.RegisterShuffle(app, 1, 4, replicate=True))["shuffle_id"]
        location = master.call(c.GetLocations(app, sid, 0))["locations"][0]
    return app, sid, location["primary"], location["replica"]


def _push(
    primary: dict[str, Any],
    replica: dict[str, Any],
    app: str,
    sid: int,
    epoch: int,
    digest: bytes,
    signer: Signer | None,
) -> None:
    data = b"record" * 100
    header = BatchHeader(1, 0, 0, len(data), 0, digest)
    target = ReplicaTarget(replica["worker_id"], _url(replica, "replicate_port"), replica["incarnation"])
    body = Push(app, sid, primary["incarnation"], ((0, epoch),), target)
    with RpcClient(_url(primary, "push_port"), timeout=10, retries=0, signer=signer) as rpc:
        rpc.call(int(MsgType.PUSH), to_json(body), [header.encode(), data])


def _memory_used(address: dict[str, Any], signer: Signer | None) -> int:
    """The worker's ``memory_used``: the placed locations' reservations are in it (issue 13)."""
    with RpcClient(_url(address, "control_port"), timeout=10, retries=0, signer=signer) as rpc:
        return from_json(WorkerInfoReply, rpc.call(int(MsgType.WORKER_INFO)).body).memory_used


def _holds_nothing(
    address: dict[str, Any], app: str, sid: int, signer: Signer | None, memory_before: int
) -> None:
    """No live location, no file, and ``memory_used`` unchanged by the refused pushes."""
    with RpcClient(_url(address, "control_port"), timeout=10, retries=0, signer=signer) as rpc:
        info = from_json(WorkerInfoReply, rpc.call(int(MsgType.WORKER_INFO)).body)
        reply = from_json(
            CommitFilesReply, rpc.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles(app, sid))).body
        )
    assert info.live_locations == 0 and info.memory_used == memory_before
    assert reply.locations == ()


def test_a_push_to_a_location_the_master_did_not_place_is_refused_and_stores_nothing(
    cluster: LocalCluster,
) -> None:
    app, sid, primary, replica = _placed(cluster)
    member = Signer.member(cluster.secret)
    before = [_memory_used(address, member) for address in (primary, replica)]
    good = batch_digest(1, 0, 0, 0, b"record" * 100)  # map 1, attempt 0, batch 0, as _push builds it
    with pytest.raises(StaleLocation):
        _push(primary, replica, app, sid + 100, 0, good, member)  # a shuffle the master never registered
    with pytest.raises(StaleLocation):
        _push(primary, replica, app, sid, 1, good, member)  # an epoch the master never made
    for address, memory in zip((primary, replica), before, strict=True):
        _holds_nothing(address, app, sid + 100, member, memory)
        _holds_nothing(address, app, sid, member, memory)


def test_a_push_with_a_bad_digest_gets_bad_request_and_stores_nothing(cluster: LocalCluster) -> None:
    app, sid, primary, replica = _placed(cluster)
    member = Signer.member(cluster.secret)
    before = [_memory_used(address, member) for address in (primary, replica)]
    with pytest.raises(BadRequest, match="digest"):
        _push(primary, replica, app, sid, 0, bytes(16), member)
    for address, memory in zip((primary, replica), before, strict=True):
        _holds_nothing(address, app, sid, member, memory)


def _app_dirs(cluster: LocalCluster, app_id: str) -> list[Path]:
    return sorted(cluster.base_dir.glob(f"worker*/disk0/{app_id}"))


def _write(client: croupier.Client, name: str) -> tuple[croupier.App, croupier.Shuffle]:
    app = client.register_app(name)
    sh = app.register_shuffle(num_mappers=1, num_partitions=6)
    with sh.writer(0, 0) as w:
        for i in range(600):
            w.write(i % 6, b"r%d" % i)
    assert sum(1 for p in range(6) for _ in sh.reader(p)) == 600  # committed, on disk
    return app, sh


def test_files_of_an_app_the_master_forgot_while_a_worker_was_down_are_deleted_at_its_restart(
    cluster: LocalCluster,
) -> None:
    with croupier.connect(cluster.master_url) as client:
        gone_app, gone = _write(client, "forgotten")
        _, kept = _write(client, "kept")
        assert len(_app_dirs(cluster, gone.app_id)) == 3 and len(_app_dirs(cluster, kept.app_id)) == 3
        cluster.kill_worker(0)
        gone_app.unregister()  # its DESTROY cannot reach worker 0
        for _ in range(100):
            if len(_app_dirs(cluster, gone.app_id)) == 1:
                break
            threading.Event().wait(0.1)
        (left,) = _app_dirs(cluster, gone.app_id)
        cluster.restart_worker(0)
        for _ in range(300):
            if not left.exists():
                break
            threading.Event().wait(0.1)
        assert not left.exists(), f"{left} outlived its app after the worker's restart"
        assert len(_app_dirs(cluster, kept.app_id)) == 3  # what the master knows stays
        assert sum(1 for p in range(6) for _ in kept.reader(p)) == 600
