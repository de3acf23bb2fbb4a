"""Unread replies are bounded in bytes on a live master and worker (issue 13).

A client sends 100 requests for the largest replies each server gives (FETCH_CHUNK of
an 8 MiB chunk; GET_LOCATIONS_BATCH of 10,000 partitions) and reads none of them. The
process RSS (master, workers and clients all live in this process) must stay within
the per-peer cap plus a margin; before issue 13 it grew by all 100 replies (800 MiB
for the chunks). Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

import croupier
from croupier.core.config import WorkerConfig
from croupier.core.errors import CroupierError
from croupier.core.wire import Header, Kind, MsgType
from croupier.services.local import LocalCluster
from croupier.transports._peer_budget import DEFAULT_PEER_REPLY_BYTES
from croupier.transports.rpc import RpcClient
from tests.fuzz.live import FAST

MIB = 1024 * 1024
REQUESTS = 100


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(workers=2, base_dir=tmp_path, worker_config=WorkerConfig(heartbeat_interval=0.5)) as lc:
        yield lc


def unread(url: str, msg_type: int, body: bytes) -> int:
    """Send REQUESTS requests and read nothing; the RSS growth once the server is done sending."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 1)
    sock.setsockopt(zmq.RCVBUF, 64 * 1024)
    sock.connect(url)
    try:
        before = rss()
        for rid in range(1, REQUESTS + 1):
            sock.send_multipart([Header(Kind.REQUEST, msg_type, rid).encode(), body])
        last, now = -1, rss()
        while abs(now - last) > MIB:
            time.sleep(1.0)
            last, now = now, rss()
        return now - before
    finally:
        sock.close(linger=0)


def test_unread_fetches_and_locations_stay_bounded(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url, config=FAST) as client:
        app = client.register_app("unread")
        shuffle = app.register_shuffle(1, 10_000, replicate=False)
        writer = shuffle.writer(0)
        for _ in range(40):
            writer.write(0, os.urandom(MIB // 2))
        assert writer.close()
        assert sum(1 for _ in shuffle.reader(0)) == 40  # waits for the commit
        located = body_of(app.app_id, shuffle.shuffle_id)
        chunk = chunk_request(cluster, located)
        worker_growth = unread(chunk[0], MsgType.FETCH_CHUNK, chunk[1])
        request = {"app_id": app.app_id, "shuffle_id": shuffle.shuffle_id, "partitions": list(range(10_000))}
        with RpcClient(cluster.master_url, timeout=30, retries=0) as rpc:
            reply_size = len(json.dumps(rpc.call(MsgType.GET_LOCATIONS_BATCH, request).body))
        batch = json.dumps(request).encode()
        master_growth = unread(cluster.master_url, MsgType.GET_LOCATIONS_BATCH, batch)
    print(f"worker: RSS +{worker_growth / MIB:.0f} MiB after {REQUESTS} unread 8 MiB FETCH_CHUNK replies")
    print(
        f"master: RSS +{master_growth / MIB:.0f} MiB after {REQUESTS} unread GET_LOCATIONS_BATCH replies"
        f" of ~{reply_size / MIB:.1f} MiB"
    )
    bound = 2 * DEFAULT_PEER_REPLY_BYTES + 64 * MIB  # generous: the 800 MiB of before is far above
    assert worker_growth < bound
    assert master_growth < bound


def body_of(app_id: str, shuffle_id: int) -> dict[str, object]:
    return {"app_id": app_id, "shuffle_id": shuffle_id, "partition": 0, "epoch": 0, "role": "primary"}


def chunk_request(cluster: LocalCluster, located: dict[str, object]) -> tuple[str, bytes]:
    """The fetch URL of the worker that holds partition 0, and a FETCH_CHUNK body for chunk 0."""
    for worker in cluster.workers:
        body = {**located, "incarnation": worker.incarnation}
        with RpcClient(worker.urls["fetch"], timeout=10, retries=0) as rpc:
            try:
                chunks = rpc.call(MsgType.OPEN_STREAM, body).body["chunks"]
            except CroupierError:
                continue
        assert chunks[0][1] >= 7 * MIB, chunks
        return worker.urls["fetch"], json.dumps({**body, "chunk": 0}).encode()
    raise AssertionError("no worker holds partition 0")
