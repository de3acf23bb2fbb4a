"""The data plane with real processes: worker loss, corruption, unregister, bad input."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest
import zmq

import croupier
from croupier.core import commands as c
from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.core.errors import BadRequest, CroupierError, DataLostError, Unauthorized
from croupier.core.replies import LocationsReply, decode_reply
from croupier.core.wire import Header, Kind, MsgType
from croupier.services.local import LocalCluster
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient

pytestmark = pytest.mark.integration


def records_for(map_id: int, partitions: int, n: int) -> dict[int, list[bytes]]:
    rng = random.Random(map_id)
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(n):
        p = rng.randrange(partitions)
        out[p].append(f"m{map_id}-r{i}-".encode() + rng.randbytes(rng.randint(0, 3000)))
    return out


def write_all(sh: croupier.Shuffle, mappers: int, partitions: int, n: int) -> dict[int, list[bytes]]:
    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for m in range(mappers):
        recs = records_for(m, partitions, n)
        with sh.writer(m, 0) as w:
            for p, items in recs.items():
                for r in items:
                    w.write(p, r)
        for p, items in recs.items():
            expected[p].extend(items)
    return expected


def check_all(sh: croupier.Shuffle, expected: dict[int, list[bytes]]) -> None:
    for p, items in expected.items():
        got = list(sh.reader(p))
        assert sorted(got) == sorted(items), f"partition {p}: {len(got)} records, expected {len(items)}"


def wait_lost(cluster: LocalCluster, workers: set[str]) -> None:
    for _ in range(200):
        lost = {w["worker_id"] for w in cluster.status()["workers"] if w["status"] == "lost"}
        if workers <= lost:
            return
        threading.Event().wait(0.1)
    raise AssertionError(f"the master did not declare {workers} lost")


def data_files(cluster: LocalCluster, role: str) -> list[Path]:
    return sorted(cluster.base_dir.glob(f"worker*/disk0/*/*/*-{role}.data"))


def test_every_partition_reads_back_after_kill_9_of_a_worker(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("loss-after-ack")
        sh = app.register_shuffle(num_mappers=3, num_partitions=12)
        expected = write_all(sh, 3, 12, 400)
        check_all(sh, expected)  # committed and readable with every worker up
        cluster.kill_worker(1)
        check_all(sh, expected)  # the replicas serve what the dead worker held
        app.unregister()


def test_both_copies_gone_is_a_data_lost_error_naming_partitions_and_workers(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("double-loss")
        sh = app.register_shuffle(num_mappers=1, num_partitions=6)
        write_all(sh, 1, 6, 200)
        list(sh.reader(0))
        killed = {cluster.kill_worker(0), cluster.kill_worker(1)}
        wait_lost(cluster, killed)
        lost = []
        for p in range(6):
            try:
                list(sh.reader(p))
            except DataLostError as exc:
                assert exc.partitions == [p]
                assert set(exc.workers) <= killed and exc.workers
                assert str(p) in str(exc)
                lost.append(p)
        assert lost  # with 3 workers, some pairs lived only on the two killed ones
        app.unregister()


def test_a_corrupted_primary_file_is_detected_and_the_replica_is_read(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("corruption")
        sh = app.register_shuffle(num_mappers=2, num_partitions=4)
        expected = write_all(sh, 2, 4, 300)
        # wait for the commit, then flip one byte in the middle of every primary file
        list(sh.reader(0))
        primaries = data_files(cluster, "primary")
        assert primaries
        for path in primaries:
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        check_all(sh, expected)
        app.unregister()


def test_a_replicate_damaged_on_the_way_is_stored_and_found_by_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica does not hash a REPLICATE again (PROTOCOL §5.2): one whose data frames were
    damaged between the workers is stored as it came. Its reader finds every damaged batch by
    its digest and reads the primary's copy; with the primaries damaged too, DATA_LOST names
    the partitions. Never a wrong record."""
    from croupier.dataplane import push

    damaged: list[int] = []

    def on_the_way(request: object) -> tuple[list[object], tuple[()]]:
        payloads = list(request.payloads)  # type: ignore[attr-defined]
        for i in range(1, len(payloads)):
            if len(payloads[i]):
                frame = bytearray(payloads[i])
                frame[len(frame) // 2] ^= 0xFF
                payloads[i] = bytes(frame)
                damaged.append(i)
        return payloads, ()

    monkeypatch.setattr(push, "_forwarded", on_the_way)
    with (
        # no memory tier: every copy is read from its file, the primaries' damaged below too
        LocalCluster(3, tmp_path / "cluster", worker_config=WorkerConfig(memory_tier_max=0)) as cluster,
        croupier.connect(cluster.master_url) as client,
    ):
        app = client.register_app("damaged-replicas")
        sh = app.register_shuffle(num_mappers=2, num_partitions=4)
        expected = write_all(sh, 2, 4, 300)
        assert damaged
        check_all(sh, expected)  # every replica is damaged: the primaries are read
        for path in data_files(cluster, "primary"):
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        for p in range(4):
            with pytest.raises(DataLostError) as lost:
                list(sh.reader(p))
            assert lost.value.partitions == [p]
        app.unregister()


def test_a_worker_killed_during_push_never_yields_wrong_data(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("loss-during-push")
        sh = app.register_shuffle(num_mappers=4, num_partitions=8)
        expected: dict[int, list[bytes]] = {p: [] for p in range(8)}
        killer = threading.Timer(0.3, cluster.kill_worker, args=(2,))
        killer.start()
        outcome = "completed"
        try:
            for m in range(4):
                recs = records_for(m, 8, 3000)
                with sh.writer(m, 0) as w:
                    for p, items in recs.items():
                        for r in items:
                            w.write(p, r)
                for p, items in recs.items():
                    expected[p].extend(items)
        except CroupierError as exc:
            outcome = f"clear error: {exc!r}"
        finally:
            killer.join()
        if outcome == "completed":
            check_all(sh, expected)
        else:
            assert "Error" in outcome or "error" in outcome
        app.unregister()


def test_unregister_removes_the_apps_files_from_every_worker(cluster: LocalCluster) -> None:
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("cleanup")
        sh = app.register_shuffle(num_mappers=2, num_partitions=9)
        expected = write_all(sh, 2, 9, 100)
        check_all(sh, expected)
        app_dirs = sorted(cluster.base_dir.glob(f"worker*/disk0/{sh.app_id}"))
        assert len(app_dirs) == 3
        app.unregister()
        deadline = 100
        while any(d.exists() for d in app_dirs) and deadline:
            threading.Event().wait(0.1)
            deadline -= 1
        assert not [d for d in app_dirs if d.exists()]


SERVED = {
    "control_port": {MsgType.RESERVE, MsgType.COMMIT_FILES, MsgType.DESTROY, MsgType.WORKER_INFO},
    "push_port": {MsgType.PUSH},
    "replicate_port": {MsgType.REPLICATE},
    "fetch_port": {MsgType.OPEN_STREAM, MsgType.FETCH_CHUNK},
}


def _well_framed(frames: list[bytes]) -> bool:
    try:
        Header.decode(frames[0])
        return isinstance(json.loads(frames[1]), dict)
    except (BadRequest, IndexError, ValueError):
        return False


WORKER_GARBAGE = [
    [os.urandom(20)],
    [Header(Kind.REQUEST, MsgType.PUSH, 5).encode(), b"{}"],
    [Header(Kind.REQUEST, MsgType.PUSH, 5).encode(), json.dumps({"app_id": "a", "shuffle_id": 0}).encode()],
    [
        Header(Kind.REQUEST, MsgType.PUSH, 5).encode(),
        json.dumps({"app_id": "a", "shuffle_id": 0, "incarnation": "x", "batches": [[0, 0]]}).encode(),
        b"short",
    ],
    [
        Header(Kind.REQUEST, MsgType.FETCH_CHUNK, 5).encode(),
        json.dumps(
            {
                "app_id": "../a",
                "shuffle_id": 0,
                "partition": 0,
                "epoch": 0,
                "role": "x",
                "incarnation": "i",
                "chunk": 0,
            }
        ).encode(),
    ],
    [Header(Kind.REQUEST, MsgType.COMMIT_FILES, 5).encode(), b"[]"],
    [Header(Kind.REQUEST, MsgType.STATUS, 5).encode(), b"{}"],  # a master message on a worker port
]


def test_garbage_on_every_worker_port_gets_bad_request_and_the_worker_keeps_serving(
    cluster: LocalCluster,
) -> None:
    with MasterClient(cluster.master_url, signer=Signer.member(cluster.secret)) as master:
        worker = master.call(c.Status())["workers"][0]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        for port in ("control_port", "push_port", "replicate_port", "fetch_port"):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 5000)
            sock.connect(f"tcp://127.0.0.1:{worker[port]}")
            try:
                for frames in WORKER_GARBAGE:
                    sock.send_multipart(frames)
                    reply = sock.recv_multipart()
                    header = Header.decode(reply[0])
                    code = "BAD_REQUEST"
                    if _well_framed(frames) and Header.decode(frames[0]).msg_type in SERVED[port]:
                        # a message this port serves, unsigned: refused before its body is read
                        code = "UNAUTHORIZED"
                    assert json.loads(reply[1])["code"] == code, (port, frames[:1], reply)
                    assert header.status in (BadRequest.status, Unauthorized.status)
            finally:
                sock.close(0)
    finally:
        ctx.term()
    # and the cluster still shuffles
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("after-garbage")
        sh = app.register_shuffle(num_mappers=1, num_partitions=3)
        check_all(sh, write_all(sh, 1, 3, 50))
        app.unregister()


def test_a_reader_follows_a_worker_that_restarted_after_the_locations_were_read(
    cluster: LocalCluster,
) -> None:
    with croupier.connect(
        cluster.master_url, config=ClientConfig(fetch_timeout=1.0, rpc_retries=0)
    ) as client:
        sh = client.register_app("moved").register_shuffle(num_mappers=2, num_partitions=6)
        expected = write_all(sh, 2, 6, 300)
        wids = [child.first_line for child in cluster._worker_procs]
        # the locations a reader saw before worker 0 restarted (old incarnation and ports)
        stale = {p: client._master.call(c.GetLocations(sh.app_id, sh.shuffle_id, p)) for p in expected}
        before = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}
        cluster.restart_worker(0)
        for _ in range(200):
            now = {w["worker_id"]: w["incarnation"] for w in cluster.status()["workers"]}
            if now[wids[0]] != before[wids[0]]:
                break
            threading.Event().wait(0.1)
        else:
            raise AssertionError("worker 0 did not re-register")
        # the other holder of each of worker 0's partitions is gone: only the moved copy is left
        cluster.kill_worker(1)
        on_restarted = [p for p in expected if wids[0] in json.dumps(stale[p]["locations"])]
        assert on_restarted
        for p in on_restarted:
            # a reader handed the stale locations, as if it had read them before the restart
            reader = croupier.Reader(sh, p, _locations=decode_reply(LocationsReply, stale[p], "GetLocations"))
            got = list(reader)
            assert sorted(got) == sorted(expected[p])


def test_workers_heartbeat_their_measured_load_and_the_master_keeps_it(tmp_path: Path) -> None:
    with LocalCluster(
        2,
        tmp_path / "load",
        worker_config=WorkerConfig(heartbeat_interval=0.2),
        master_config=MasterConfig(worker_timeout=30.0, takeover_grace=1.0),
    ) as cl:
        with croupier.connect(cl.master_url) as client:
            app = client.register_app("load")
            sh = app.register_shuffle(num_mappers=1, num_partitions=4)
            with sh.writer(0) as w:
                for i in range(2_000):
                    w.write(i % 4, os.urandom(2_000))
            assert sum(len(list(sh.reader(p))) for p in range(4)) == 2_000
            app.unregister()
        assert cl.master is not None
        pause = threading.Event()
        for _ in range(100):  # until both workers have heartbeated since they started
            loads = cl.master.describe().worker_load
            if loads is not None and len(loads) == 2:
                break
            pause.wait(0.1)
        assert loads is not None and set(loads) == {w.worker_id for w in cl.workers}
        assert all(0.0 <= score <= 1.0 for score in loads.values())
        for worker in cl.workers:  # what each sent last, also in WORKER_INFO
            info = worker.info()
            assert 0.0 <= info["disk_util"] <= 1.0 and 0.0 <= info["io_wait"] <= 1.0


def test_a_commit_asks_workers_declared_lost_before_it_names_their_data_lost(cluster: LocalCluster) -> None:
    """Two workers silent past the worker timeout (an overloaded machine: here SIGSTOP) when the
    last map ends, answering again a moment later: the data is there and must read back. The old
    commit never asked a worker the master had declared lost, so every copy on them 'failed at
    commit' and their partitions read as DataLost (issue 25's false DataLost under load)."""
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("silent-at-commit")
        sh = app.register_shuffle(num_mappers=1, num_partitions=6)
        recs = records_for(0, 6, 300)
        w = sh.writer(0, 0)
        for p, items in recs.items():
            for r in items:
                w.write(p, r)
        # every batch and seal acknowledged by both copies, the map not ended yet
        w._sender.submit(w._accumulator.flush())
        w._sender.submit(w._accumulator.seals())
        w._sender.drain()
        wids = cluster.worker_ids()
        cluster.pause_worker(0)
        cluster.pause_worker(1)
        try:
            wait_lost(cluster, {wids[0], wids[1]})
            assert w._mapper_end().won  # the commit starts while both are declared lost
            threading.Event().wait(0.5)
        finally:
            cluster.resume_worker(0)
            cluster.resume_worker(1)
        w._state = "closed"  # ended above
        w._sender.abort()
        for p, items in recs.items():
            assert sorted(sh.reader(p)) == sorted(items), f"partition {p}"
        app.unregister()
