"""ZooKeeperEventLog against a real ZooKeeper: the shared conformance suite, then what only ZooKeeper has.

The conformance tests are the very functions of ``tests/ha/test_eventlog_conformance.py``,
collected again here with the ``kind``/``backend``/``backend_factory`` fixtures
overridden to open ZooKeeper logs (a fresh root per log store; ``reopen``
closes the log and opens a new ``ZooKeeperEventLog`` on the same root).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss

from croupier.core.errors import NotLeader, Unavailable
from croupier.ha.eventlog import EventLog, LogCorrupted, LogLocked, LogTruncated
from croupier.ha.zklog import Fence, Fenced, ZooKeeperEventLog, encode_group
from croupier.ha.zkserver import LocalZooKeeper
from tests.ha import test_eventlog_conformance as suite
from tests.ha.test_eventlog_conformance import Backend

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]
pytest_plugins = ["integration.zk_fixtures"]  # zk_server, zk, zk_root, zk_connect, zk_module_client

# -- the conformance suite, against ZooKeeper ---------------------------------------------------

# Every test of the suite, except the one that is about the memory and file logs only.
_MEMORY_AND_FILE_ONLY = {"test_context_manager_closes"}
for _name in dir(suite):
    if _name.startswith("test_") and _name not in _MEMORY_AND_FILE_ONLY:
        globals()[_name] = getattr(suite, _name)


class ZkBackend(Backend):
    """Opens ``ZooKeeperEventLog``s (writers) on one root: the root is the storage."""

    def __init__(self, client: KazooClient, root: str) -> None:
        super().__init__("zookeeper", Path(os.devnull))
        self.client = client
        self.root = root

    def open(self) -> EventLog:
        log = ZooKeeperEventLog(self.client, self.root)
        self.opened.append(log)
        return log


@pytest.fixture(scope="module")
def kind() -> str:
    return "zookeeper"


@pytest.fixture(scope="module")
def backend_factory(zk_module_client: KazooClient) -> Callable[[Path], Backend]:
    # module-scoped, as hypothesis wants: each example gets a fresh root instead of a fresh client
    return lambda _directory: ZkBackend(zk_module_client, f"/conformance-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def backend(zk: KazooClient, zk_root: str) -> Iterator[Backend]:
    b = ZkBackend(zk, zk_root)
    yield b
    b.close_all()


@pytest.fixture
def log(backend: Backend) -> EventLog:
    return backend.open()


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def opened() -> Iterator[list[ZooKeeperEventLog]]:
    """Logs a test opened; closed at teardown whatever happened."""
    logs: list[ZooKeeperEventLog] = []
    yield logs
    for one in logs:
        one.close()


def batches(zk: KazooClient, root: str) -> list[str]:
    return sorted(zk.get_children(f"{root}/log"))


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def make_fence(zk: KazooClient, root: str) -> Fence:
    """What a leader does on takeover: bump /epoch, fenced by the new version and its election node."""
    zk.ensure_path(f"{root}/election")
    if not zk.exists(f"{root}/epoch"):
        zk.create(f"{root}/epoch", b"0")
    node = zk.create(f"{root}/election/n_", b"me", ephemeral=True, sequence=True)
    _data, stat = zk.get(f"{root}/epoch")
    new = zk.set(f"{root}/epoch", b"1", version=stat.version)
    return Fence(epoch_version=new.version, election_node=node)


# -- the byte format and group commit ---------------------------------------------------------


def test_one_append_is_one_znode_in_the_documented_format(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    assert log.append([b"a", b"", b"xyz"]) == 3
    assert log.append([b"q" * 1000] * 100) == 103
    names = batches(zk, zk_root)
    assert names == ["batch-0000000000", "batch-0000000001"]
    data, _ = zk.get(f"{zk_root}/log/batch-0000000000")
    assert data == struct.pack("<QI", 1, 3) + b"".join(
        struct.pack("<I", len(r)) + r for r in (b"a", b"", b"xyz")
    )
    assert data == encode_group(1, [b"a", b"", b"xyz"])
    second, _ = zk.get(f"{zk_root}/log/batch-0000000001")
    assert struct.unpack_from("<QI", second) == (4, 100)
    # the writer lock is an ephemeral znode of this session, gone after close
    _holder, stat = zk.get(f"{zk_root}/writer")
    assert stat.ephemeralOwner == zk.client_id[0]
    log.close()
    assert zk.exists(f"{zk_root}/writer") is None
    assert zk.connected, "close() must leave the caller's client alone"


def test_group_size_limits(zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]) -> None:
    log = ZooKeeperEventLog(zk, zk_root, max_group_bytes=4096)
    opened.append(log)
    assert log.max_record_bytes == 4096 - 16
    assert log.append([b"x" * log.max_record_bytes]) == 1
    with pytest.raises(ValueError, match="limit"):
        log.append([b"x" * (log.max_record_bytes + 1)])
    with pytest.raises(ValueError, match="split it"):
        log.append([b"y" * 3000, b"z" * 3000])
    assert log.last_seq() == 1
    assert len(batches(zk, zk_root)) == 1
    with pytest.raises(ValueError, match="max_group_bytes"):
        ZooKeeperEventLog(zk, zk_root + "-big", max_group_bytes=2 * 1024 * 1024)

    # the default stays under ZooKeeper's 1 MiB znode limit with room to spare
    big = ZooKeeperEventLog(zk, zk_root + "-default")
    opened.append(big)
    with pytest.raises(ValueError, match="limit"):
        big.append([bytes(500 * 1024), bytes(500 * 1024)])
    assert big.append([bytes(big.max_record_bytes)]) == 1
    assert [len(r) for _, r in big.read()] == [big.max_record_bytes]


# -- fencing ------------------------------------------------------------------------------------


def test_a_bumped_epoch_fences_appends_and_snapshots(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    fence = make_fence(zk, zk_root)
    log = ZooKeeperEventLog(zk, zk_root, fence=fence)
    opened.append(log)
    assert log.append([b"a", b"b"]) == 2
    log.write_snapshot(1, b"S1")
    # another master takes over: it bumps /epoch
    zk.set(f"{zk_root}/epoch", b"2")
    with pytest.raises(Fenced, match=r"deposed.*another master took over") as info:
        log.append([b"c"])
    assert isinstance(info.value, NotLeader)
    with pytest.raises(Fenced):
        log.write_snapshot(2, b"S2")
    assert log.last_seq() == 2
    assert len(batches(zk, zk_root)) == 1
    assert log.latest_snapshot() == (1, b"S1")
    assert list(log.read(after=1)) == [(2, b"b")]


def test_a_lost_election_node_fences_appends(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    fence = make_fence(zk, zk_root)
    log = ZooKeeperEventLog(zk, zk_root, fence=fence)
    opened.append(log)
    assert log.append([b"a"]) == 1
    zk.delete(fence.election_node)
    with pytest.raises(Fenced, match="election node"):
        log.append([b"b"])
    assert log.last_seq() == 1
    assert len(batches(zk, zk_root)) == 1


def test_a_second_writer_is_locked_out_but_views_are_not(
    zk: KazooClient,
    zk_server: LocalZooKeeper,
    zk_connect: Callable[[str], KazooClient],
    zk_root: str,
    opened: list[ZooKeeperEventLog],
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    log.append([b"a"])
    other = zk_connect(zk_server.hosts)
    with pytest.raises(LogLocked, match="already open by writer"):
        ZooKeeperEventLog(other, zk_root)
    view = ZooKeeperEventLog(other, zk_root, writer=False)
    opened.append(view)
    assert list(view.read()) == [(1, b"a")]
    with pytest.raises(NotLeader, match="read-only"):
        view.append([b"b"])
    log.close()
    taken = ZooKeeperEventLog(other, zk_root)
    opened.append(taken)
    assert taken.append([b"b"]) == 2


def test_a_stale_writer_node_of_our_own_session_is_taken_over(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    # what a close() that could not reach ZooKeeper leaves behind
    zk.create(f"{zk_root}/writer", b"an older log of this session", ephemeral=True, makepath=True)
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    assert log.append([b"a"]) == 1


# -- read-only views ----------------------------------------------------------------------------


def test_a_view_follows_the_writer_and_its_watch_fires(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    view = ZooKeeperEventLog(zk, zk_root, writer=False)
    opened += [log, view]
    woke = threading.Event()
    calls: list[str] = []

    def on_change() -> None:
        calls.append(threading.current_thread().name)
        woke.set()

    view.watch(on_change)
    assert woke.wait(5), "the watch is called once when it is set"
    woke.clear()
    log.append([b"a", b"b"])
    assert woke.wait(5)
    assert list(view.read()) == [(1, b"a"), (2, b"b")]
    assert view.last_seq() == 2
    woke.clear()
    log.append([b"c"])
    assert woke.wait(5)
    assert list(view.read(after=2)) == [(3, b"c")]

    log.write_snapshot(2, b"S2")
    assert view.latest_snapshot() == (2, b"S2")
    with pytest.raises(LogTruncated):
        view.read(after=1)
    assert list(view.read(after=2)) == [(3, b"c")]
    assert view.last_seq() == 3

    view.close()
    woke.clear()
    log.append([b"d"])
    time.sleep(0.3)
    assert not woke.is_set(), "a closed view's watch stays quiet"


# -- snapshots ----------------------------------------------------------------------------------


def test_a_big_snapshot_is_chunked_and_checked(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    log.append([b"a"])
    state = os.urandom(2 * 1024 * 1024 + 12345)  # incompressible, > 2 MiB: three chunks
    log.write_snapshot(1, state)
    dirs = [c for c in zk.get_children(f"{zk_root}/snapshots") if c != "latest"]
    assert len(dirs) == 1 and dirs[0].startswith("snap-00000000000000000001-")
    chunks = sorted(zk.get_children(f"{zk_root}/snapshots/{dirs[0]}"))
    assert chunks == ["chunk-000000", "chunk-000001", "chunk-000002"]
    assert log.latest_snapshot() == (1, state)
    log.close()
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    assert log.latest_snapshot() == (1, state)

    # a damaged chunk is detected, not returned
    zk.set(f"{zk_root}/snapshots/{dirs[0]}/chunk-000001", b"x" * 10)
    with pytest.raises(LogCorrupted, match="does not match"):
        log.latest_snapshot()


def test_a_snapshot_deletes_covered_batches_and_older_snapshots(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    for i in range(10):
        log.append([b"%d.0" % i, b"%d.1" % i])  # batch i holds seqs 2i+1, 2i+2
    assert len(batches(zk, zk_root)) == 10
    log.write_snapshot(7, b"S7")  # straddles batch 3 (seqs 7, 8): it is kept
    assert len(batches(zk, zk_root)) == 7
    assert next(iter(log.read(after=7))) == (8, b"3.1")
    first_dir = [c for c in zk.get_children(f"{zk_root}/snapshots") if c != "latest"]
    log.write_snapshot(20, b"S20")
    assert batches(zk, zk_root) == []
    dirs = [c for c in zk.get_children(f"{zk_root}/snapshots") if c != "latest"]
    assert len(dirs) == 1 and dirs != first_dir
    assert log.append([b"next"]) == 21
    log.close()
    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    assert (log.latest_snapshot(), log.last_seq(), list(log.read(after=20))) == (
        (20, b"S20"),
        21,
        [(21, b"next")],
    )


def test_open_deletes_what_a_crash_after_the_pointer_left(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    log = ZooKeeperEventLog(zk, zk_root)
    for record in (b"a", b"b", b"c"):
        log.append([record])
    log.close()
    # A writer died after moving the pointer to its snapshot at seq 2, before deleting
    # anything; an even older writer left a snapshot directory nothing points to.
    new_dir = "snap-00000000000000000002-0123abcd"
    zk.create(f"{zk_root}/snapshots/{new_dir}/chunk-000000", b"S2", makepath=True)
    zk.create(f"{zk_root}/snapshots/snap-00000000000000000001-dead", b"")
    pointer = {"seq": 2, "dir": new_dir, "chunks": 1, "size": 2, "crc32": zlib.crc32(b"S2")}
    zk.set(f"{zk_root}/snapshots/latest", json.dumps(pointer).encode())

    log = ZooKeeperEventLog(zk, zk_root)
    opened.append(log)
    assert batches(zk, zk_root) == ["batch-0000000002"]
    assert sorted(zk.get_children(f"{zk_root}/snapshots")) == ["latest", new_dir]
    assert log.latest_snapshot() == (2, b"S2")
    assert (log.last_seq(), list(log.read(after=2))) == (3, [(3, b"c")])


def test_gaps_and_garbage_are_corruption(zk: KazooClient, zk_root: str) -> None:
    zk.create(f"{zk_root}/log/batch-", encode_group(1, [b"a"]), sequence=True, makepath=True)
    zk.create(f"{zk_root}/log/batch-", encode_group(3, [b"c"]), sequence=True)
    with pytest.raises(LogCorrupted, match="starts at seq 3; the previous one ends at 1"):
        ZooKeeperEventLog(zk, zk_root)
    # nothing was repaired, and the lock was released again
    assert len(batches(zk, zk_root)) == 2
    assert zk.exists(f"{zk_root}/writer") is None
    zk.create(f"{zk_root}-late/log/batch-", encode_group(2, [b"b"]), sequence=True, makepath=True)
    with pytest.raises(LogCorrupted, match=r"records 1\.\.1 are missing"):
        ZooKeeperEventLog(zk, f"{zk_root}-late", writer=False)
    root2 = zk_root + "-garbage"
    zk.create(f"{root2}/log/batch-", encode_group(1, [b"a"])[:-1], sequence=True, makepath=True)
    with pytest.raises(LogCorrupted, match="batch-0000000000") as info:
        ZooKeeperEventLog(zk, root2, writer=False)
    assert info.value.details["path"] == f"{root2}/log/batch-0000000000"


# -- ZooKeeper failures -------------------------------------------------------------------------


class _LostReply:
    def get(self, timeout: float | None = None) -> Any:
        raise ConnectionLoss("injected: the reply was lost")


class _LossyTransaction:
    def __init__(self, tx: Any, lands: bool) -> None:
        self._tx = tx
        self._lands = lands

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    def commit_async(self) -> _LostReply:
        if self._lands:
            self._tx.commit_async().get(timeout=10)
        return _LostReply()


class LossyClient:
    """A KazooClient whose next transaction loses its reply, after landing or before."""

    def __init__(self, zk: KazooClient, *, lands: bool) -> None:
        self._zk = zk
        self.lands = lands
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)

    def transaction(self) -> Any:
        tx = self._zk.transaction()
        if self.armed:
            self.armed = False
            return _LossyTransaction(tx, self.lands)
        return tx


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "lost"])
def test_a_lost_reply_never_writes_a_batch_twice(
    zk: KazooClient, zk_root: str, opened: list[ZooKeeperEventLog], lands: bool
) -> None:
    lossy = LossyClient(zk, lands=lands)
    log = ZooKeeperEventLog(lossy, zk_root, fence=make_fence(zk, zk_root))
    opened.append(log)
    log.append([b"a"])
    lossy.armed = True
    assert log.append([b"b", b"c"]) == 3
    assert not lossy.armed
    assert len(batches(zk, zk_root)) == 2
    assert list(log.read()) == [(1, b"a"), (2, b"b"), (3, b"c")]
    assert log.append([b"d"]) == 4


def _expire_session(zk: KazooClient, hosts: str) -> None:
    """Expire ``zk``'s session for real: attach a second client to it and close that one."""
    session_id, password = zk.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password))
    try:
        thief.start(timeout=30)
    finally:
        thief.stop()
        thief.close()


def test_session_expiry_fences_the_writer(
    zk: KazooClient, zk_server: LocalZooKeeper, zk_root: str, opened: list[ZooKeeperEventLog]
) -> None:
    states: list[str] = []
    zk.add_listener(states.append)
    try:
        log = ZooKeeperEventLog(zk, zk_root)
        opened.append(log)
        log.append([b"a"])
        _expire_session(zk, zk_server.hosts)
        wait_until(lambda: KazooState.LOST in states and zk.connected)
        with pytest.raises((Unavailable, Fenced)):
            log.append([b"b"])
        with pytest.raises(Fenced, match="writer lock"):
            log.append([b"c"])
        view = ZooKeeperEventLog(zk, zk_root, writer=False)
        opened.append(view)
        assert list(view.read()) == [(1, b"a")]
    finally:
        zk.remove_listener(states.append)


def test_an_unreachable_zookeeper_is_unavailable(
    zk_connect: Callable[[str], KazooClient], zk_root: str, tmp_path: Path
) -> None:
    with LocalZooKeeper(tmp_path / "zk").start() as server:
        client = zk_connect(server.hosts)
        log = ZooKeeperEventLog(client, zk_root, op_timeout=1.0)
        log.append([b"a"])
        server.stop()
        with pytest.raises(Unavailable, match="cannot"):
            log.append([b"b"])
        with pytest.raises(Unavailable):
            log.read()
        log.close()  # must neither hang (the per-test timeout catches that) nor raise
