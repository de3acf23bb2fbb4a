"""Attacks from a second client on the network that knows only URLs and ids (issue 14, "Why").

Real processes (``croupier master`` and ``croupier worker`` with a cluster secret, as
``croupier local`` starts them); the attacker speaks the documented protocol with raw
ZeroMQ messages and no credentials, except in the replica-redirect test, where it is a
legitimate app of the cluster (it registers its own app and signs with that app's key,
computed here from PROTOCOL §2.1 alone). Every attack is refused with ``UNAUTHORIZED``
(status 18) or its effect is prevented, and the victim's data stays exact.

This file imports nothing of the auth code on purpose: it is also a second, independent
implementation of the auth frame.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import pytest
import zmq

import croupier
from croupier.core.commands import GetLocations
from croupier.services.local import LocalCluster
from integration.conftest import local_cluster

pytestmark = pytest.mark.integration

UNAUTHORIZED = 18
_HEADER = struct.Struct("<4sBBHQHH")
_ids = itertools.count(1)

# msg types (PROTOCOL §4, §5.2)
REGISTER_WORKER, LOSE_WORKER, EXCLUDE_WORKER, DECOMMISSION_WORKER = 10, 12, 13, 14
REGISTER_APP, UNREGISTER_APP, EXPIRE_APP = 20, 22, 23
REGISTER_SHUFFLE, MAPPER_END, REPORT_COMMIT, GET_LOCATIONS, UNREGISTER_SHUFFLE = 30, 32, 33, 34, 35
GET_SHUFFLE, STATUS = 36, 40
PUSH, REPLICATE, COMMIT_FILES, OPEN_STREAM, FETCH_CHUNK, DESTROY, WORKER_INFO, RESERVE = range(50, 58)


def raw(
    url: str,
    msg_type: int,
    body: dict[str, Any],
    payloads: tuple[bytes, ...] = (),
    *,
    key: bytes | None = None,
    timeout_ms: int = 10_000,
) -> tuple[int, dict[str, Any]]:
    """One request on a fresh DEALER: ``(status, reply body)``; signed as an app with ``key``."""
    data = json.dumps(body, separators=(",", ":")).encode()
    flags = 1 if key is not None else 0
    header = _HEADER.pack(b"CRPR", 1, 0, msg_type, next(_ids), 0, flags)
    frames = [header, data]
    if key is not None:
        prefix = struct.pack("<B7xQ", 2, time.time_ns() // 1000)
        covered = header + prefix + struct.pack("<I", len(data)) + data + (payloads[0] if payloads else b"")
        frames.append(prefix + blake3.blake3(covered, key=key).digest())
    frames += payloads
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(url)
        sock.send_multipart(frames)
        if not sock.poll(timeout_ms):
            raise AssertionError(f"no reply from {url} to message type {msg_type}")
        reply = sock.recv_multipart()
    finally:
        sock.close(0)
    status = _HEADER.unpack(reply[0])[5]
    return status, json.loads(reply[1])


def _batch(map_id: int, attempt: int, batch_id: int, data: bytes, flags: int = 0) -> bytes:
    covered = struct.pack("<IIIII", map_id, attempt, batch_id, len(data), flags)
    return covered + blake3.blake3(covered + data).digest(length=16)


def _url(address: dict[str, Any], port: str) -> str:
    return f"tcp://{address['host']}:{address[port]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("security"), worker_timeout=30.0) as cl:
        yield cl


class Victim:
    """A real app that writes ``records`` per partition with the SDK and reads them back."""

    def __init__(self, cluster: LocalCluster, name: str, partitions: int = 4, mappers: int = 2) -> None:
        self.name = name
        self.client = croupier.connect(cluster.master_url)
        self.app = self.client.register_app(name)
        self.shuffle = self.app.register_shuffle(num_mappers=mappers, num_partitions=partitions)
        self.partitions = partitions
        self.mappers = mappers
        self.expected = {p: [f"{name}-m{m}-p{p}".encode() for m in range(mappers)] for p in range(partitions)}

    def write(self) -> None:
        for m in range(self.mappers):
            with self.shuffle.writer(m, 0) as w:
                for p in range(self.partitions):
                    w.write(p, f"{self.name}-m{m}-p{p}".encode())

    def check(self) -> None:
        for p in range(self.partitions):
            assert sorted(self.shuffle.reader(p, timeout=60)) == sorted(self.expected[p]), f"partition {p}"

    def ids(self) -> dict[str, Any]:
        return {"app_id": self.app.app_id, "shuffle_id": self.shuffle.shuffle_id}

    def close(self) -> None:
        self.client.close()


def _workers(cluster: LocalCluster) -> list[dict[str, Any]]:
    return list(cluster.status()["workers"])


def _locations(victim: Victim, partition: int) -> dict[str, Any]:
    """Partition ``partition``'s epoch-0 location, as the victim's own client sees it."""
    command = GetLocations(victim.app.app_id, victim.shuffle.shuffle_id, partition)
    return dict(victim.client._master.call(command)["locations"][0])


def _push_body(victim: Victim, partition: int) -> tuple[str, dict[str, Any]]:
    """The push URL and a PUSH body for the victim's partition, as its writer would send them."""
    loc = _locations(victim, partition)
    primary, replica = loc["primary"], loc["replica"]
    body = {
        **victim.ids(),
        "incarnation": primary["incarnation"],
        "batches": [[partition, loc["epoch"]]],
        "replica": {
            "worker_id": replica["worker_id"],
            "url": _url(replica, "replicate_port"),
            "incarnation": replica["incarnation"],
        },
    }
    return _url(primary, "push_port"), body


def test_status_without_credentials_shows_counts_but_no_ids(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "listed")
    try:
        status, body = raw(cluster.master_url, STATUS, {})
        assert status == 0
        text = json.dumps(body)
        assert victim.app.app_id not in text
        for worker in _workers(cluster):
            assert worker["worker_id"] not in text and worker["incarnation"] not in text
        assert "apps" not in body and "shuffles" not in body and "workers" not in body
        assert body["counts"]["workers"] == 3
    finally:
        victim.close()


def test_reading_another_apps_partition_is_refused(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "readme")
    try:
        victim.write()
        victim.check()
        ids = victim.ids()
        assert raw(cluster.master_url, GET_LOCATIONS, {**ids, "partition": 0})[0] == UNAUTHORIZED
        assert raw(cluster.master_url, GET_SHUFFLE, ids)[0] == UNAUTHORIZED
        loc = _locations(victim, 0)
        primary = loc["primary"]
        stream = {**ids, "partition": 0, "epoch": loc["epoch"], "role": "primary"}
        stream["incarnation"] = primary["incarnation"]
        assert raw(_url(primary, "fetch_port"), OPEN_STREAM, stream)[0] == UNAUTHORIZED
        assert raw(_url(primary, "fetch_port"), FETCH_CHUNK, {**stream, "chunk": 0})[0] == UNAUTHORIZED
    finally:
        victim.close()


def test_an_injected_batch_is_refused_and_the_victim_reads_its_own(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "injected")
    try:
        forged = b"\x07\x00\x00\x00INJECTED"  # one record, as the SDK packs them
        for p in range(victim.partitions):
            url, body = _push_body(victim, p)
            status, _ = raw(url, PUSH, body, (_batch(0, 0, 0, forged), forged))
            assert status == UNAUTHORIZED
            replica = _locations(victim, p)["replica"]
            rep = {**victim.ids(), "incarnation": replica["incarnation"], "batches": body["batches"]}
            status, _ = raw(
                _url(replica, "replicate_port"), REPLICATE, rep, (_batch(0, 0, 0, forged), forged)
            )
            assert status == UNAUTHORIZED
        victim.write()
        victim.check()
    finally:
        victim.close()


def _bitmap(partitions: int, touched: range) -> str:
    bits = bytearray((partitions + 7) // 8)
    for p in touched:
        bits[p // 8] |= 1 << (p % 8)
    return base64.b64encode(bytes(bits)).decode()


def test_forged_mapper_end_and_report_commit_are_refused(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "forged")
    try:
        ids = victim.ids()
        for m in range(victim.mappers):
            end = {**ids, "map_id": m, "attempt_id": 99, "touched": 0, "partitions": _bitmap(4, range(0))}
            assert raw(cluster.master_url, MAPPER_END, end)[0] == UNAUTHORIZED
        assert raw(cluster.master_url, REPORT_COMMIT, ids)[0] == UNAUTHORIZED  # empty: "nothing was written"
        workers = [w["worker_id"] for w in _workers(cluster)]
        failed = [[p, 0, w] for p in range(victim.partitions) for w in workers]
        report = {**ids, "failed_copies": failed, "total_bytes": 0, "total_batches": 0}
        assert raw(cluster.master_url, REPORT_COMMIT, report)[0] == UNAUTHORIZED
        victim.write()
        victim.check()
    finally:
        victim.close()


def test_deleting_another_app_is_refused(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "deleted")
    try:
        victim.write()
        ids = victim.ids()
        assert raw(cluster.master_url, UNREGISTER_SHUFFLE, ids)[0] == UNAUTHORIZED
        assert raw(cluster.master_url, UNREGISTER_APP, {"app_id": ids["app_id"]})[0] == UNAUTHORIZED
        assert raw(cluster.master_url, EXPIRE_APP, {"app_id": ids["app_id"]})[0] == UNAUTHORIZED
        for worker in _workers(cluster):
            control = _url(worker, "control_port")
            assert raw(control, DESTROY, {"app_id": ids["app_id"]})[0] == UNAUTHORIZED
            assert raw(control, DESTROY, ids)[0] == UNAUTHORIZED
            assert raw(control, COMMIT_FILES, ids)[0] == UNAUTHORIZED
            assert raw(control, WORKER_INFO, {})[0] == UNAUTHORIZED
        victim.check()
    finally:
        victim.close()


def test_a_worker_cannot_be_hijacked_starved_or_reserved_by_an_outsider(cluster: LocalCluster) -> None:
    before = {w["worker_id"]: w for w in _workers(cluster)}
    for wid, worker in before.items():
        hijack = {
            "worker_id": wid,
            "host": "127.0.0.1",
            "control_port": 1,
            "push_port": 2,
            "replicate_port": 3,
            "fetch_port": 4,
            "slots": 10,
            "incarnation": "attacker",
        }
        assert raw(cluster.master_url, REGISTER_WORKER, hijack)[0] == UNAUTHORIZED
        beat = {"worker_id": wid, "incarnation": worker["incarnation"]}
        assert raw(cluster.master_url, 11, beat)[0] == UNAUTHORIZED  # WORKER_HEARTBEAT
        assert raw(cluster.master_url, LOSE_WORKER, {"worker_id": wid})[0] == UNAUTHORIZED
        exclude = {"worker_id": wid, "excluded": True, "reason": "x"}
        assert raw(cluster.master_url, EXCLUDE_WORKER, exclude)[0] == UNAUTHORIZED
        assert raw(cluster.master_url, DECOMMISSION_WORKER, {"worker_id": wid})[0] == UNAUTHORIZED
        reserve = {
            "app_id": "starve",
            "shuffle_id": 0,
            "incarnation": worker["incarnation"],
            "num_partitions": 99_999,
            "replicate": False,
            "pairs": [[wid, None]],
            "revived": [],
        }
        assert raw(_url(worker, "control_port"), RESERVE, reserve)[0] == UNAUTHORIZED
    after = {w["worker_id"]: w for w in _workers(cluster)}
    assert after == before  # same addresses, incarnations, status, exclusion
    victim = Victim(cluster, "after-hijack")
    try:
        victim.write()
        victim.check()
    finally:
        victim.close()


def test_a_push_cannot_redirect_a_worker_to_another_address(cluster: LocalCluster, tmp_path: Path) -> None:
    # the attacker is a legitimate app of this cluster: it has its own app and key
    status, reply = raw(cluster.master_url, REGISTER_APP, {"name": "redirector", "app_id": None})
    assert status == 0
    app_id = reply["app_id"]
    key = bytes.fromhex(reply["app_key"]) if "app_key" in reply else None
    status, shuffle = raw(
        cluster.master_url,
        REGISTER_SHUFFLE,
        {"app_id": app_id, "num_mappers": 1, "num_partitions": 1, "replicate": True},
        key=key,
    )
    assert status == 0, shuffle
    status, locs = raw(
        cluster.master_url,
        GET_LOCATIONS,
        {"app_id": app_id, "shuffle_id": shuffle["shuffle_id"], "partition": 0},
        key=key,
    )
    assert status == 0, locs
    loc = locs["locations"][0]
    primary, replica = loc["primary"], loc["replica"]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    trap = ctx.socket(zmq.ROUTER)
    trap.setsockopt(zmq.LINGER, 0)
    port = trap.bind_to_random_port("tcp://127.0.0.1")
    try:
        body = {
            "app_id": app_id,
            "shuffle_id": shuffle["shuffle_id"],
            "incarnation": primary["incarnation"],
            "batches": [[0, 0]],
            "replica": {
                "worker_id": replica["worker_id"],
                "url": f"tcp://127.0.0.1:{port}",
                "incarnation": replica["incarnation"],
            },
        }
        data = b"\x01\x00\x00\x00x"
        status, _ = raw(_url(primary, "push_port"), PUSH, body, (_batch(0, 0, 0, data), data), key=key)
        assert status == 12  # UNAVAILABLE (failed_worker = the replica): not where the master placed it
        assert not trap.poll(500), "the worker connected where the push said"
    finally:
        trap.close(0)


def test_a_victims_reads_stay_exact_under_a_flood_of_forged_pushes(cluster: LocalCluster) -> None:
    victim = Victim(cluster, "flooded", partitions=8, mappers=3)
    stop = threading.Event()
    sent = [0]

    # every partition's real push target and body, and every port of every worker
    pushes = [_push_body(victim, p) for p in range(victim.partitions)]
    ports = [
        _url(w, port)
        for w in _workers(cluster)
        for port in ("push_port", "replicate_port", "control_port", "fetch_port")
    ]

    def flood() -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        socks = {url: ctx.socket(zmq.DEALER) for url in {*ports, *(u for u, _ in pushes)}}
        for url, sock in socks.items():
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(url)
        forged = b"\x06\x00\x00\x00FORGED"
        try:
            while not stop.is_set():
                for i, url in enumerate(itertools.chain((u for u, _ in pushes), ports)):
                    body = pushes[i % len(pushes)][1]
                    for batch_id in range(3):
                        flags = batch_id % 2  # every other one with a random "auth" frame
                        header = _HEADER.pack(b"CRPR", 1, 0, PUSH, next(_ids), 0, flags)
                        auth = [os.urandom(48)] if flags else []
                        frames = [header, json.dumps(body).encode(), *auth]
                        frames += [_batch(0, 0, batch_id, forged), forged]
                        with contextlib.suppress(zmq.Again):
                            socks[url].send_multipart(frames, zmq.NOBLOCK)
                            sent[0] += 1
                    while socks[url].poll(0):
                        socks[url].recv_multipart()
        finally:
            for sock in socks.values():
                sock.close(0)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)  # the forged batches go first, as in the issue
        victim.write()
        victim.check()
    finally:
        stop.set()
        thread.join(30)
        victim.close()
    assert sent[0] > 100
