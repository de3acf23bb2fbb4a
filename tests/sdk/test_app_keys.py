"""App keys (issue 14 item 2) on a real master and real workers with a cluster secret:
``REGISTER_APP`` answers the app's key, batch digests are keyed by it, so a forged batch
is refused by the worker and dropped by the reader, and a shuffle travels between
clients as its handle."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import croupier
from croupier._client import Shuffle, parse_handle
from croupier._reader import wait_committed
from croupier.core.batch import BATCH_HEADER, BatchHeader
from croupier.core.codec import to_json
from croupier.core.commands import GetLocations, GetShuffle, RegisterApp
from croupier.core.config import ClientConfig
from croupier.core.dataplane import OpenStream, Push, ReplicaTarget
from croupier.core.errors import BadRequest, DataLostError, Unauthorized
from croupier.core.replies import LocationsReply, RegisterAppReply, ShuffleSummary
from croupier.core.wire import MsgType
from croupier.transports.auth import Signer
from croupier.transports.digest import batch_digest
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from tests.sdk.secure import SECRET, SecureCluster, secure_cluster

RECORDS = [b"r%03d" % i * 8 for i in range(40)]


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureCluster]:
    with secure_cluster(tmp_path) as cluster:
        yield cluster


def _write_and_commit(sh: Shuffle) -> None:
    with sh.writer(0) as w:
        for i, record in enumerate(RECORDS):
            w.write(i % sh.num_partitions, record)


def _expected(partition: int, partitions: int = 2) -> list[bytes]:
    return [r for i, r in enumerate(RECORDS) if i % partitions == partition]


def test_register_app_answers_the_app_key_the_same_on_a_repeat_and_never_logs_it(
    secure: SecureCluster, tmp_path: Path
) -> None:
    with MasterClient(secure.master_url, timeout=5) as master:
        first = master.request(RegisterApp("job", "job-1"), RegisterAppReply)
        with pytest.raises(Unauthorized):  # an unsigned repeat would hand anyone the key
            master.request(RegisterApp("job", "job-1"), RegisterAppReply)
    with MasterClient(secure.master_url, timeout=5, signer=Signer.member(SECRET)) as master:
        again = master.request(RegisterApp("job", "job-1"), RegisterAppReply)
    assert first.app_key == again.app_key != SECRET.app_key("job-1").hex()  # keyed by its registration
    assert first.app_key is not None and len(first.app_key) == 64 and first.key_tag is None
    with croupier.connect(secure.master_url, config=ClientConfig(app_heartbeat_interval=0)) as client:
        app = client.register_app("job")
        assert app.app_key is not None and app.app_key != SECRET.app_key(app.app_id)
        assert app.app_key.hex() not in repr(app)
    logged = b"".join(p.read_bytes() for p in (tmp_path / "master").rglob("*") if p.is_file())
    assert b"job-1" in logged and first.app_key.encode() not in logged


def test_without_a_secret_there_is_no_key_and_digests_stay_unkeyed(tmp_path: Path) -> None:
    with secure_cluster(tmp_path, secret=None) as cluster, croupier.connect(cluster.master_url) as client:
        app = client.register_app("plain")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        assert app.app_key is None and sh.handle() == f"croupier-shuffle-v1:{app.app_id}:{sh.shuffle_id}:"
        _write_and_commit(sh)
        with croupier.connect(cluster.master_url) as other:
            assert list(other.open_shuffle(app.app_id, sh.shuffle_id).reader(1)) == _expected(1)
            assert list(other.open_shuffle(sh.handle()).reader(0)) == _expected(0)


def _forged_push(sh: Shuffle, partition: int, key: bytes | None) -> None:
    """What an attacker who knows the ids but not the key sends: batch (map 0, attempt 0,
    batch 0) of the victim's partition, right layout, a digest of its own. Unsigned, the
    request is UNAUTHORIZED before its batches are read (PROTOCOL §2.1); signed as a member
    (a compromised member, or a bug) its digests are still checked against the app key."""
    location = sh.routing.current(partition)
    data = struct.pack("<I", 8) + b"INJECTED"
    header = BatchHeader(0, 0, 0, len(data), 0, batch_digest(0, 0, 0, 0, data, key))
    replica = location.replica
    assert replica is not None and replica.incarnation is not None
    target = ReplicaTarget(replica.worker_id, replica.replicate_url, replica.incarnation)
    assert location.primary.incarnation is not None
    body = Push(
        sh.app_id, sh.shuffle_id, location.primary.incarnation, ((partition, location.epoch),), target
    )
    with RpcClient(location.primary.push_url, timeout=5, retries=0) as rpc, pytest.raises(Unauthorized):
        rpc.call(int(MsgType.PUSH), to_json(body), [header.encode(), data])
    signer = Signer.member(SECRET)
    with RpcClient(location.primary.push_url, timeout=5, retries=0, signer=signer) as rpc:
        rpc.call(int(MsgType.PUSH), to_json(body), [header.encode(), data])


def test_a_forged_push_is_refused_and_the_victim_reads_exactly_its_records(secure: SecureCluster) -> None:
    with croupier.connect(secure.master_url) as client:
        sh = client.register_app("victim").register_shuffle(num_mappers=1, num_partitions=2)
        for key in (None, bytes(32), SECRET.app_key("someone-else")):
            with pytest.raises(BadRequest, match=r"batch 0 \(map 0 attempt 0 batch 0\) does not match"):
                _forged_push(sh, 1, key)
        _write_and_commit(sh)
        assert list(sh.reader(1)) == _expected(1)
        assert list(sh.reader(0)) == _expected(0)


def _forge_first_batch(secure: SecureCluster, sh: Shuffle, partition: int, role: str) -> None:
    """Overwrite the first batch of a committed copy with one of the same size and ids, its
    records changed and its digest made unkeyed (what a tampered disk or worker would serve)."""
    name = f"{partition}-0-{role}.data"
    paths = [p for w in secure.workers for p in w.dirs[0].rglob(name) if sh.app_id in p.parts]
    assert len(paths) == 1, paths
    raw = bytearray(paths[0].read_bytes())
    header = BatchHeader.decode(memoryview(raw)[: BATCH_HEADER.size])
    size = header.length
    data = struct.pack("<I", size - 4) + b"X" * (size - 4)
    digest = batch_digest(header.map_id, header.attempt_id, header.batch_id, 0, data)
    forged = BatchHeader(header.map_id, header.attempt_id, header.batch_id, size, 0, digest)
    raw[: BATCH_HEADER.size + size] = forged.encode() + data
    paths[0].write_bytes(bytes(raw))


def test_the_reader_drops_a_forged_copy_and_never_returns_a_forged_record(secure: SecureCluster) -> None:
    with croupier.connect(secure.master_url) as client:
        sh = client.register_app("victim").register_shuffle(num_mappers=1, num_partitions=2)
        _write_and_commit(sh)
        wait_committed(sh, GetLocations(sh.app_id, sh.shuffle_id, 0), LocationsReply, 30.0)  # files final
        _forge_first_batch(secure, sh, 0, "primary")
        reader = sh.reader(0)
        assert list(reader) == _expected(0)  # read from the replica
        assert reader.stats["switches"] == 1
        for role in ("primary", "replica"):
            _forge_first_batch(secure, sh, 1, role)
        with pytest.raises(DataLostError):
            list(sh.reader(1))


def test_a_handle_opens_the_shuffle_in_another_client(secure: SecureCluster) -> None:
    with croupier.connect(secure.master_url) as client, croupier.connect(secure.master_url) as other:
        app = client.register_app("owner")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        handle = sh.handle()
        assert app.app_key is not None
        assert handle == f"croupier-shuffle-v1:{app.app_id}:{sh.shuffle_id}:{app.app_key.hex()}"
        assert parse_handle(handle) == (app.app_id, sh.shuffle_id, app.app_key)
        opened = other.open_shuffle(handle)
        assert opened.app_key == app.app_key and opened.handle() == handle
        _write_and_commit(opened)  # written by the other client, read by both
        assert list(client.open_shuffle(app.app_id, sh.shuffle_id).reader(0)) == _expected(0)
        assert list(opened.reader(1)) == _expected(1)
        assert handle not in repr(opened) and app.app_key.hex() not in repr(opened)


@pytest.mark.parametrize(
    "bad",
    [
        "app-1:0",
        "croupier-shuffle-v1:app-1:0",
        "croupier-shuffle-v2:app-1:0:",
        "croupier-shuffle-v1:app-1:x:",
        "croupier-shuffle-v1:app-1:\u0663:",
        "croupier-shuffle-v1::0:",
        "croupier-shuffle-v1:app-1:0:abcd",
        "croupier-shuffle-v1:app-1:0:" + "G" * 64,
    ],
)
def test_a_malformed_handle_is_a_bad_request_that_does_not_echo_it(bad: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_handle(bad)
    assert bad not in caught.value.message


def test_the_two_id_form_on_a_cluster_that_wants_a_key_says_a_handle_is_needed(
    secure: SecureCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master that refuses an unsigned GET_SHUFFLE (UNAUTHORIZED) makes ``open_shuffle(app_id,
    shuffle_id)`` raise ``Unauthorized`` naming the handle; once the client has the key (from a
    handle, or because it registered the app) the ids are enough."""
    with croupier.connect(secure.master_url) as client, croupier.connect(secure.master_url) as other:
        app = client.register_app("owner")
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        real = other._master.request
        monkeypatch.setattr(other, "_signer", Signer())  # as in another process: no key learned

        def refuse_unsigned(command: Any, reply_type: Any) -> Any:
            if isinstance(command, GetShuffle) and command.app_id not in other._keys:
                raise Unauthorized("the request needs a signature")
            return real(command, reply_type)

        monkeypatch.setattr(other._master, "request", refuse_unsigned)
        with pytest.raises(Unauthorized, match=r"handle \(open_shuffle\(shuffle.handle\(\)\)"):
            other.open_shuffle(app.app_id, sh.shuffle_id)
        assert other.open_shuffle(sh.handle()).app_key == app.app_key
        assert other.open_shuffle(app.app_id, sh.shuffle_id).app_key == app.app_key
        assert client.open_shuffle(app.app_id, sh.shuffle_id).app_key == app.app_key
        assert app.open_shuffle(sh.shuffle_id).handle() == sh.handle()


def test_a_second_client_of_the_process_opening_by_ids_reads_with_the_app_key(secure: SecureCluster) -> None:
    """Its requests are signed with the key another client of this process learned, so its
    reader must check digests keyed with it too (it read every copy as damaged before)."""
    with croupier.connect(secure.master_url) as owner, croupier.connect(secure.master_url) as other:
        sh = owner.register_app("owner").register_shuffle(num_mappers=1, num_partitions=2)
        _write_and_commit(sh)
        opened = other.open_shuffle(sh.app_id, sh.shuffle_id)
        assert opened.app_key == sh.app_key
        assert list(opened.reader(0)) == _expected(0)


def test_a_key_belongs_to_one_registration_of_its_id(secure: SecureCluster) -> None:
    """Issue 22 §2: whoever registers a predictable id first, notes its key and unregisters
    must not hold the key of the real app that registers the id later. Master and workers
    refuse the old key; the real app writes and reads as usual."""
    quiet = ClientConfig(app_heartbeat_interval=0)
    with croupier.connect(secure.master_url, config=quiet) as attacker:
        squatter = attacker.register_app("nightly", app_id="etl-nightly")
        old_key, old_handle = squatter.app_key, squatter.handle()
        squatter.unregister()
    assert old_key is not None
    with croupier.connect(secure.master_url) as client:
        app = client.register_app("nightly", app_id="etl-nightly")
        assert app.app_key is not None and app.app_key != old_key
        sh = app.register_shuffle(num_mappers=1, num_partitions=2)
        _forged_push_signed(sh, 1, old_key)
        _write_and_commit(sh)
        signer = Signer()
        signer.add_app(app.app_id, old_key)
        with MasterClient(secure.master_url, timeout=5, signer=signer) as master, pytest.raises(Unauthorized):
            master.request(GetShuffle(app.app_id, sh.shuffle_id), ShuffleSummary)
        with croupier.connect(secure.master_url) as other, pytest.raises(Unauthorized):
            other.attach(old_handle)
        location = sh.routing.current(1)
        assert location.primary.incarnation is not None
        stream = OpenStream(
            app.app_id, sh.shuffle_id, 1, location.epoch, "primary", location.primary.incarnation
        )
        fetch = RpcClient(location.primary.fetch_url, timeout=5, retries=0, signer=signer)
        with fetch as rpc, pytest.raises(Unauthorized):
            rpc.call(int(MsgType.OPEN_STREAM), to_json(stream), [])
        assert list(sh.reader(1)) == _expected(1)
        assert list(sh.reader(0)) == _expected(0)


def _forged_push_signed(sh: Shuffle, partition: int, key: bytes) -> None:
    """A PUSH signed with ``key`` as the app, its batch digest keyed by ``key`` too."""
    location = sh.routing.current(partition)
    data = struct.pack("<I", 8) + b"INJECTED"
    header = BatchHeader(0, 0, 0, len(data), 0, batch_digest(0, 0, 0, 0, data, key))
    replica = location.replica
    assert replica is not None and replica.incarnation is not None
    assert location.primary.incarnation is not None
    target = ReplicaTarget(replica.worker_id, replica.replicate_url, replica.incarnation)
    body = Push(
        sh.app_id, sh.shuffle_id, location.primary.incarnation, ((partition, location.epoch),), target
    )
    signer = Signer()
    signer.add_app(sh.app_id, key)
    push = RpcClient(location.primary.push_url, timeout=5, retries=0, signer=signer)
    with push as rpc, pytest.raises(Unauthorized):
        rpc.call(int(MsgType.PUSH), to_json(body), [header.encode(), data])
