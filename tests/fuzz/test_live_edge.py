"""Regression tests of issue 13 against a live in-process cluster (master + 2 workers).

Each bad input is refused (BAD_REQUEST, or a dropped connection for an oversized frame),
and a normal shuffle completes afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core.config import WorkerConfig
from croupier.core.errors import BadRequest
from croupier.core.wire import MAX_CONTROL_FRAME_BYTES, MsgType
from croupier.services.local import LocalCluster
from tests.fuzz.live import RawClient, small_shuffle

REGISTER = {
    "worker_id": "evil",
    "host": "h",
    "control_port": 1,
    "push_port": 2,
    "replicate_port": 3,
    "fetch_port": 4,
    "slots": 100,
    "incarnation": "i1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # per test, not per module: the leak check stops whatever a test leaves running
    config = WorkerConfig(heartbeat_interval=0.5, max_message_bytes=4 * 1024 * 1024)
    with LocalCluster(workers=2, base_dir=tmp_path, worker_config=config) as lc:
        yield lc


@pytest.fixture
def raw(cluster: LocalCluster) -> Iterator[RawClient]:
    client = RawClient(cluster.master_url)
    yield client
    client.close()


@pytest.mark.parametrize(
    "body",
    [
        b'{"worker_id":"evil","host":"\\ud800","control_port":1,"push_port":2,"replicate_port":3,'
        b'"fetch_port":4,"slots":100,"incarnation":"i1"}',
        {**REGISTER, "host": "a b"},
        {**REGISTER, "fetch_port": 0},
    ],
)
def test_bad_worker_host_is_refused_and_shuffles_go_on(
    cluster: LocalCluster, raw: RawClient, body: object
) -> None:
    assert raw.request(MsgType.REGISTER_WORKER, body) == BadRequest.status
    small_shuffle(cluster.master_url, "after-host")


def test_lone_surrogate_replica_url_is_refused_and_pushes_go_on(cluster: LocalCluster) -> None:
    worker = cluster.workers[0]
    body = (
        b'{"app_id":"a","shuffle_id":0,"incarnation":"'
        + worker.incarnation.encode()
        + b'","batches":[[0,0]],'
        b'"replica":{"worker_id":"w","url":"tcp://\\ud800:1","incarnation":"j"}}'
    )
    push = RawClient(worker.urls["push"])
    try:
        assert push.request(MsgType.PUSH, body, bytes(36), b"") == BadRequest.status
    finally:
        push.close()
    small_shuffle(cluster.master_url, "after-url")


def test_reason_over_one_kib_is_refused(cluster: LocalCluster, raw: RawClient) -> None:
    worker_id = cluster.workers[0].worker_id
    assert raw.request(
        MsgType.EXCLUDE_WORKER, {"worker_id": worker_id, "excluded": False, "reason": "x" * 900_000}
    ) == (BadRequest.status)


@pytest.mark.parametrize("port", ["master", "control", "fetch"])
def test_control_ports_drop_frames_over_one_mib(cluster: LocalCluster, port: str) -> None:
    url = cluster.master_url if port == "master" else cluster.workers[0].urls[port]
    client = RawClient(url, timeout=2.0)
    try:
        assert client.request(MsgType.PING, b"{}", bytes(MAX_CONTROL_FRAME_BYTES)) is not None
        assert client.request(MsgType.PING, b"{}", bytes(MAX_CONTROL_FRAME_BYTES + 1)) is None
    finally:
        client.close()
    small_shuffle(cluster.master_url, f"after-{port}")


def test_push_port_takes_frames_up_to_its_limit(cluster: LocalCluster) -> None:
    client = RawClient(cluster.workers[0].urls["push"], timeout=2.0)
    try:
        assert client.request(MsgType.PUSH, b"{}", bytes(2 * 1024 * 1024)) == BadRequest.status
        assert client.request(MsgType.PUSH, b"{}", bytes(4 * 1024 * 1024 + 1)) is None
    finally:
        client.close()
