"""``ControlHandler`` behind a real control server: DESTROY waits for the actors off the
server thread, COMMIT_FILES reports committed files no actor holds, PING/WORKER_INFO answer,
RESERVE records placements (and DESTROY or an orphan drop forgets them)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pykka
import pytest

from croupier.actors.partition_actor import Drop, PartitionActor
from croupier.core.codec import from_json, to_json
from croupier.core.dataplane import (
    CommitFiles,
    CommitFilesReply,
    Destroy,
    DestroyReply,
    LocationReport,
    Reserve,
    ReserveReply,
    WorkerInfoReply,
)
from croupier.core.errors import CroupierError, StaleLocation
from croupier.core.wire import MsgType
from croupier.dataplane.control import ControlHandler
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.reservations import Reservations
from croupier.storage.index import IndexBuilder
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import LocationKey, MemoryPartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.rpc import Reply, RpcClient, RpcServer
from croupier.transports.secret import AppTags
from tests.storage.helpers import append, batch, key, seal

INFO = WorkerInfoReply("worker-1", "inc-1", {"control": "tcp://x:1"}, 0, 0, 0, 100, 0, 0.25, 0.0)
CONTROL_TYPES = [MsgType.RESERVE, MsgType.COMMIT_FILES, MsgType.DESTROY, MsgType.WORKER_INFO, MsgType.PING]


class SlowOwner(pykka.ThreadingActor):
    """Stands in for a ``PartitionActor`` whose ``Drop`` waits until the test opens ``gate``."""

    def __init__(self, gate: threading.Event, dropping: threading.Event) -> None:
        super().__init__()
        self._gate = gate
        self._dropping = dropping

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Drop):
            self._dropping.set()
            self._gate.wait(timeout=60)


@dataclass
class Control:
    store: MemoryPartitionStore
    locations: Locations
    reservations: Reservations
    handler: ControlHandler
    gate: threading.Event
    dropping: threading.Event
    client: RpcClient
    pipelined: AsyncRpcClient
    url: str
    tags: AppTags


def committed_file(store: MemoryPartitionStore, k: LocationKey) -> None:
    builder = IndexBuilder(1000)
    f = store.create(k)
    append(f, builder, [batch(3, 0, 0, b"abc"), seal(3, 0, 1)])
    f.commit(builder.build())


@pytest.fixture
def control() -> Iterator[Control]:
    store = MemoryPartitionStore()
    gate, dropping = threading.Event(), threading.Event()
    locations = Locations(MemoryLimiter(1 << 30))
    locations.open(1, lambda: cast("pykka.ActorRef[PartitionActor]", SlowOwner.start(gate, dropping)))
    reservations = Reservations(Identity("worker-1", "inc-1"))
    tags = AppTags()
    handler = ControlHandler(locations, reservations, store, "inc-1", lambda: INFO, app_tags=tags)
    server = RpcServer("tcp://127.0.0.1:0", handler.on_control, allowed_types=[int(t) for t in CONTROL_TYPES])
    server.start()
    client = RpcClient(server.url, timeout=10, retries=0)
    pipelined = AsyncRpcClient(timeout=30)
    pipelined.start()
    try:
        yield Control(
            store, locations, reservations, handler, gate, dropping, client, pipelined, server.url, tags
        )
    finally:
        gate.set()
        pipelined.stop()
        client.close()
        server.stop()
        handler.close()
        for ref in locations.all():
            ref.stop()
        store.close()


def test_a_destroy_waiting_for_a_slow_actor_does_not_hold_up_other_control_requests(
    control: Control,
) -> None:
    k = key(app="app-1", shuffle=7)
    committed_file(control.store, k)
    control.locations.admit(k)
    replies: queue.SimpleQueue[tuple[Reply | None, CroupierError | None]] = queue.SimpleQueue()
    control.pipelined.send(
        control.url, MsgType.DESTROY, to_json(Destroy("app-1", 7)), [], lambda r, e: replies.put((r, e))
    )
    assert control.dropping.wait(10)  # the actor holds the Drop: the destroy is pending
    ping = control.client.call(int(MsgType.PING))
    assert ping.body["pong"] is True and isinstance(ping.body["time_us"], int)
    info = control.client.call(int(MsgType.WORKER_INFO))
    assert from_json(WorkerInfoReply, info.body) == INFO
    assert replies.empty()
    assert control.store.committed(k) is not None  # files go only once the actors have dropped
    control.gate.set()
    reply, error = replies.get(timeout=30)
    assert error is None and reply is not None
    assert from_json(DestroyReply, reply.body) == DestroyReply(removed=1)
    assert control.store.committed(k) is None
    assert control.locations.get(k) is None


def test_commit_reports_committed_files_no_actor_holds(control: Control) -> None:
    on_disk = key(app="app-1", shuffle=3, partition=5)
    committed_file(control.store, on_disk)
    committed_file(control.store, key(app="app-1", shuffle=4))  # another shuffle: not reported
    body = control.client.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles("app-1", 3))).body
    reply = from_json(CommitFilesReply, body)
    assert reply.incarnation == "inc-1"
    assert reply.locations == (
        LocationReport(5, 0, "primary", ok=True, bytes=36 * 2 + 3, batches=1, chunks=1, seals=((3, 0, 1),)),
    )


def reserve(control: Control, shuffle: int, incarnation: str = "inc-1") -> ReserveReply:
    body = to_json(Reserve("app-1", shuffle, incarnation, 4, False, pairs=(("worker-1", None),)))
    return from_json(ReserveReply, control.client.call(int(MsgType.RESERVE), body).body)


def test_a_reserve_is_recorded_once_and_a_destroy_forgets_it(control: Control) -> None:
    assert reserve(control, 1) == ReserveReply(shuffles=1)
    assert reserve(control, 1) == ReserveReply(shuffles=1)  # idempotent
    assert reserve(control, 2) == ReserveReply(shuffles=2)
    control.reservations.check_push("app-1", 1, ((3, 0),), None)
    control.gate.set()
    control.client.call(int(MsgType.DESTROY), to_json(Destroy("app-1", 1)))
    assert control.reservations.keys() == {("app-1", 2)}
    with pytest.raises(StaleLocation):
        control.reservations.check_push("app-1", 1, ((3, 0),), None)


def test_a_reserve_for_another_incarnation_is_stale(control: Control) -> None:
    with pytest.raises(StaleLocation):
        reserve(control, 1, incarnation="inc-0")
    assert control.reservations.keys() == set()


def test_an_orphan_drop_removes_the_files_and_the_live_locations(control: Control) -> None:
    gone, kept = key(app="app-1", shuffle=5), key(app="app-1", shuffle=6)
    for k in (gone, kept):
        committed_file(control.store, k)
    control.locations.admit(gone)
    control.gate.set()
    control.handler.drop_orphan("app-1", 5)
    control.handler.close()  # waits for the removal queued on the destroy pool
    assert control.store.committed(gone) is None and control.locations.get(gone) is None
    assert control.store.committed(kept) is not None


def test_a_ping_tells_the_workers_clock_and_nothing_about_it(control: Control) -> None:
    # issue 22 §3.7: a client whose nonces a worker refuses ("nonce outside the window") can
    # compare clocks; PING is open, so it no longer hands out what member-only WORKER_INFO says
    import time

    before = time.time_ns() // 1000
    body = control.client.call(int(MsgType.PING)).body
    after = time.time_ns() // 1000
    assert set(body) == {"pong", "time_us"} and before <= body["time_us"] <= after


TAG_1, TAG_2 = "0123456789abcdef", "fedcba9876543210"


def test_commit_files_keeps_the_key_tag_beside_the_files_and_a_destroy_drops_it(control: Control) -> None:
    committed_file(control.store, key(app="app-1", shuffle=3))
    control.client.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles("app-1", 3, key_tag=TAG_1)))
    assert control.tags.get("app-1") == TAG_1
    restarted = MemoryPartitionStore(control.store.backing)  # what a restarted worker finds
    assert restarted.key_tag("app-1") == TAG_1
    control.gate.set()
    control.client.call(int(MsgType.DESTROY), to_json(Destroy("app-1")))
    assert control.tags.get("app-1") is None and restarted.key_tag("app-1") is None


def test_a_new_registrations_tag_destroys_what_is_held_of_the_earlier_one_first(control: Control) -> None:
    old, other = key(app="app-1", shuffle=0), key(app="app-2", shuffle=0)
    committed_file(control.store, old)
    committed_file(control.store, other)
    control.locations.admit(old)
    control.tags.set("app-1", TAG_1)  # kept on disk before a restart, or a DESTROY that never came
    control.gate.set()
    body = to_json(Reserve("app-1", 0, "inc-1", 4, False, pairs=(("worker-1", None),), key_tag=TAG_2))
    assert from_json(ReserveReply, control.client.call(int(MsgType.RESERVE), body).body) == ReserveReply(1)
    assert control.tags.get("app-1") == TAG_2
    # never read with TAG_2:
    assert control.store.committed(old) is None and control.locations.get(old) is None
    assert control.store.committed(other) is not None
    assert control.reservations.keys() == {("app-1", 0)}  # the new registration's reservation


def test_the_same_tag_again_keeps_the_files(control: Control) -> None:
    k = key(app="app-1", shuffle=0)
    committed_file(control.store, k)
    control.tags.set("app-1", TAG_1)
    control.client.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles("app-1", 0, key_tag=TAG_1)))
    assert control.store.committed(k) is not None and control.tags.get("app-1") == TAG_1


def test_a_message_without_a_tag_keeps_a_tagged_apps_files_and_tag(control: Control) -> None:
    """Only an app logged before key tags has none: a COMMIT_FILES that names no tag for an app
    whose registration has one is not a new registration (it destroyed the app's reservations)."""
    k = key(app="app-1", shuffle=0)
    committed_file(control.store, k)
    control.tags.set("app-1", TAG_1)
    control.client.call(int(MsgType.COMMIT_FILES), to_json(CommitFiles("app-1", 0)))
    assert control.store.committed(k) is not None and control.tags.get("app-1") == TAG_1
    assert MemoryPartitionStore(control.store.backing).key_tag("app-1") == TAG_1


def test_a_reregistration_during_a_destroy_keeps_what_it_writes(control: Control) -> None:
    """DESTROY of an app removes its files off the server thread, once its actors have dropped
    them. A new registration of the id reserving meanwhile is answered only after that removal:
    what it writes after its reply is never removed by the earlier registration's DESTROY."""
    old = key(app="app-1", shuffle=0)
    committed_file(control.store, old)
    control.locations.admit(old)
    control.tags.set("app-1", TAG_1)
    order: queue.SimpleQueue[str] = queue.SimpleQueue()
    control.pipelined.send(
        control.url, MsgType.DESTROY, to_json(Destroy("app-1")), [], lambda r, e: order.put("destroyed")
    )
    assert control.dropping.wait(10)  # the destroy is pending on the actor
    body = to_json(Reserve("app-1", 0, "inc-1", 4, False, pairs=(("worker-1", None),), key_tag=TAG_2))
    control.pipelined.send(control.url, MsgType.RESERVE, body, [], lambda r, e: order.put("reserved"))
    new = key(app="app-1", shuffle=0, partition=1)
    written = False
    try:
        if order.get(timeout=1.0) == "reserved":  # answered at once: the new app writes now
            committed_file(control.store, new)
            written = True
    except queue.Empty:
        pass
    control.gate.set()
    seen = [order.get(timeout=30) for _ in range(1 if written else 2)]
    if not written:
        assert seen == ["destroyed", "reserved"]
        committed_file(control.store, new)
    assert control.store.committed(new) is not None, "the new registration's file was removed"
    assert control.store.committed(old) is None
    assert control.reservations.keys() == {("app-1", 0)} and control.tags.get("app-1") == TAG_2
