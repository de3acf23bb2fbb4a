"""The writer's sender against a fake transport and a fake master: no sockets, no threads of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from croupier._accumulator import OutBatch, make_batch
from croupier._routing import PartitionLocation, Routing, WorkerAddress
from croupier._sender import Sender
from croupier.core.batch import BATCH_HEADER, BatchHeader
from croupier.core.enums import WorkerStatus
from croupier.core.errors import (
    BadRequest,
    Congested,
    CroupierError,
    DataLostError,
    HardSplit,
    RequestTimeout,
    StaleLocation,
    Unavailable,
)
from croupier.core.wire import MsgType
from croupier.transports.rpc import Reply

Callback = Callable[[Reply | None, CroupierError | None], None]


def addr(wid: str) -> WorkerAddress:
    n = int(wid[1:])
    return WorkerAddress(
        wid,
        host="127.0.0.1",
        control_port=6000 + n,
        push_port=7000 + n,
        replicate_port=8000 + n,
        fetch_port=9000 + n,
        incarnation=f"inc-{wid}",
        status=WorkerStatus.ACTIVE,
    )


WORKERS = {w: addr(w) for w in ("w0", "w1", "w2", "w3", "w4")}


def routing() -> Routing:
    # partition p -> pairs[p % 2]: even on (w0, w1), odd on (w1, w2)
    return Routing([["w0", "w1"], ["w1", "w2"]], WORKERS)


@dataclass
class Sent:
    url: str
    msg_type: int
    body: dict[str, Any]
    payloads: list[bytes]
    callback: Callback

    def headers(self) -> list[BatchHeader]:
        frame = self.payloads[0]
        return [BatchHeader.decode(frame, i) for i in range(0, len(frame), BATCH_HEADER.size)]

    def ack(self) -> None:
        self.callback(Reply({}, []), None)


class FakeNet:
    """Replies with ``script`` results in order (None = OK, "hold" = no reply yet), then OK."""

    def __init__(self, *script: CroupierError | str | dict[str, Any] | None) -> None:
        self.script = list(script)
        self.sent: list[Sent] = []
        self.held: list[Sent] = []

    def send(self, url: str, msg_type: int, body: dict[str, Any], payloads: Any, callback: Callback) -> None:
        sent = Sent(url, msg_type, body, list(payloads), callback)
        self.sent.append(sent)
        result = self.script.pop(0) if self.script else None
        if result == "hold":
            self.held.append(sent)
        elif isinstance(result, CroupierError):
            callback(None, result)
        else:
            sent.ack()


class FakeMaster:
    """Revives to (w3, w4), then (w4, w3), ... with the next epoch."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str, tuple[str, ...]]] = []

    def revive(self, partition: int, epoch: int, reason: str, failed: tuple[str, ...]) -> PartitionLocation:
        self.calls.append((partition, epoch, reason, failed))
        pair = ("w3", "w4") if epoch % 2 == 0 else ("w4", "w3")
        return PartitionLocation(epoch + 1, WORKERS[pair[0]], WORKERS[pair[1]])


def make_sender(net: FakeNet, master: FakeMaster | None = None, **kw: Any) -> Sender:
    master = master or FakeMaster()
    return Sender(
        app_id="app-1",
        shuffle_id=4,
        routing=kw.pop("routing", None) or routing(),
        send=net.send,
        revive=master.revive,
        stall_timeout=5.0,
        **kw,
    )


def b(partition: int, batch_id: int, size: int = 10) -> OutBatch:
    return make_batch(partition, 0, 0, batch_id, b"x" * size)


def test_push_message_layout() -> None:
    net = FakeNet()
    sender = make_sender(net)
    sender.submit([b(0, 0), b(2, 0, 0)])
    sender.drain()
    assert sender.unacked == 0
    (msg,) = net.sent
    assert msg.url == "tcp://127.0.0.1:7000" and msg.msg_type == MsgType.PUSH
    assert msg.body == {
        "app_id": "app-1",
        "shuffle_id": 4,
        "incarnation": "inc-w0",
        "batches": [[0, 0], [2, 0]],
        "replica": {"worker_id": "w1", "url": "tcp://127.0.0.1:8001", "incarnation": "inc-w1"},
    }
    assert len(msg.payloads) == 3
    assert [h.batch_id for h in msg.headers()] == [0, 0]
    assert msg.payloads[1] == b"x" * 10 and msg.payloads[2] == b""


def test_no_replica_when_not_replicated() -> None:
    net = FakeNet()
    sender = make_sender(net, routing=Routing([["w0", None]], WORKERS))
    sender.submit([b(0, 0)])
    sender.drain()
    assert net.sent[0].body["replica"] is None


def test_idle_worker_gets_a_message_at_once_busy_one_gets_merged_messages() -> None:
    net = FakeNet("hold")
    sender = make_sender(net, merge_size=100)
    sender.submit([b(0, 0)])
    assert len(net.sent) == 1  # the worker was idle
    sender.submit([b(0, 1), b(2, 0)])  # 2 x 46 bytes: staged, the worker is busy
    assert len(net.sent) == 1
    sender.submit([b(4, 0)])  # 138 bytes staged >= 100: a merged message (of 2 that fit)
    assert len(net.sent) == 2
    assert [h.batch_id for h in net.sent[1].headers()] == [1, 0]
    net.held[0].ack()
    sender.drain()
    assert sender.unacked == 0
    assert sum(len(s.headers()) for s in net.sent) == 4


def test_pairs_go_to_their_own_primary() -> None:
    net = FakeNet()
    sender = make_sender(net)
    sender.submit([b(0, 0), b(1, 0)])
    sender.drain()
    assert sorted(s.url for s in net.sent) == ["tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001"]


def test_a_big_batch_goes_alone() -> None:
    net = FakeNet("hold")
    sender = make_sender(net, merge_size=100)
    sender.submit([b(0, 0)])
    sender.submit([b(0, 1), b(0, 2, 500), b(0, 3)])
    net.held[0].ack()
    sender.drain()
    assert [len(s.headers()) for s in net.sent] == [1, 1, 1, 1]


def test_write_blocks_while_the_window_is_full() -> None:
    net = FakeNet("hold", "hold", "hold", "hold")
    sender = make_sender(net, window=3, merge_size=1)
    for i in range(3):
        sender.submit([b(0, i)])
    assert len(net.sent) == 3 and sender.in_flight("w0") == 3
    done = threading.Event()

    def fourth() -> None:
        sender.submit([b(0, 3)])
        done.set()

    t = threading.Thread(target=fourth)
    t.start()
    time.sleep(0.2)
    assert not done.is_set() and len(net.sent) == 3
    net.held[0].ack()
    t.join(5)
    assert done.is_set() and len(net.sent) == 4
    for s in net.held[1:]:
        s.ack()
    sender.drain()
    assert sender.unacked == 0


def test_congested_message_is_resent_unchanged_with_backoff() -> None:
    net = FakeNet(Congested("busy"), Congested("busy"), None)
    sender = make_sender(net)
    sender.submit([b(0, 0), b(2, 0)])
    sender.drain()  # backs off 5 ms, then 10 ms (not asserted: tests never assert timings)
    assert len(net.sent) == 3 and sender.congested == 2
    assert net.sent[0].payloads == net.sent[2].payloads and net.sent[0].body is net.sent[2].body
    assert sender.unacked == 0


def test_unavailable_revives_and_resends_with_the_same_ids() -> None:
    master = FakeMaster()
    net = FakeNet(Unavailable("replica down", {"failed_worker": "w1"}))
    sender = make_sender(net, master)
    sender.submit([b(0, 0), b(0, 1), b(2, 0)])
    sender.drain()
    assert sorted(master.calls) == [
        (0, 0, "UNAVAILABLE: replica down", ("w1",)),
        (2, 0, "UNAVAILABLE: replica down", ("w1",)),
    ]
    first, resent = net.sent
    assert resent.url == "tcp://127.0.0.1:7003" and resent.body["incarnation"] == "inc-w3"
    assert resent.body["replica"]["worker_id"] == "w4"
    assert resent.body["batches"] == [[0, 1], [0, 1], [2, 1]]
    assert [h.encode() for h in resent.headers()] == [h.encode() for h in first.headers()]
    assert sender.revived == 2 and sender.unacked == 0


def test_timeout_blames_the_primary_and_stale_location_blames_nobody() -> None:
    master = FakeMaster()
    sender = make_sender(FakeNet(RequestTimeout("slow"), StaleLocation("old epoch")), master)
    sender.submit([b(0, 0)])
    sender.drain()
    assert [(c[1], c[3]) for c in master.calls] == [(0, ("w0",)), (1, ())]


def test_a_partition_is_revived_once_per_failed_epoch() -> None:
    master = FakeMaster()
    net = FakeNet("hold", "hold")
    sender = make_sender(net, master, merge_size=1)
    sender.submit([b(0, 0)])
    sender.submit([b(0, 1)])
    assert len(net.sent) == 2
    net.held[0].callback(None, RequestTimeout("t"))
    net.held[1].callback(None, StaleLocation("old"))
    sender.drain()
    assert len(master.calls) == 1  # the second failure found the partition already moved
    assert all(s.body["batches"] == [[0, 1]] for s in net.sent[2:])
    assert sender.unacked == 0


def test_gives_up_after_max_revives_naming_partition_and_workers() -> None:
    net = FakeNet(*[Unavailable("down")] * 20)
    sender = make_sender(net, max_revives=3)
    sender.submit([b(2, 0)])
    with pytest.raises(Unavailable) as info:
        sender.drain()
    assert "partition 2" in info.value.message and "3 revives" in info.value.message
    assert info.value.details["workers"] == ["w0", "w1", "w3", "w4"]


def test_other_errors_are_raised() -> None:
    sender = make_sender(FakeNet(BadRequest("nope")))
    sender.submit([b(0, 0)])
    with pytest.raises(BadRequest, match="nope"):
        sender.drain()


def test_an_unregistered_primary_is_revived_without_a_push() -> None:
    master = FakeMaster()
    net = FakeNet()
    gone = Routing([["w9", "w1"]], WORKERS)  # w9 has no address
    sender = make_sender(net, master, routing=gone)
    sender.submit([b(0, 0)])
    sender.drain()
    assert master.calls[0][3] == ("w9",)
    assert [s.url for s in net.sent] == ["tcp://127.0.0.1:7003"]


def test_abort_ignores_late_replies() -> None:
    net = FakeNet("hold")
    sender = make_sender(net)
    sender.submit([b(0, 0), b(2, 0)])
    sender.abort()
    net.held[0].callback(None, BadRequest("late"))
    sender.poll()  # nothing raised


def test_revives_are_shared_through_the_routing() -> None:
    shared = routing()
    master = FakeMaster()
    first = make_sender(FakeNet(Unavailable("x")), master, routing=shared)
    first.submit([b(0, 0)])
    first.drain()
    net = FakeNet()
    second = make_sender(net, master, routing=shared)
    second.submit([b(0, 0)])
    second.drain()
    assert net.sent[0].url == "tcp://127.0.0.1:7003" and len(master.calls) == 1


def test_a_hard_split_revives_only_the_locations_it_names() -> None:
    # issue 22 §3.8: both forms name [[partition, epoch]]; the message's other partitions on
    # that worker are fine there and are only resent
    master = FakeMaster()
    refusal = HardSplit("disk failed", {"partitions": [[0, 0]], "reason": "no disk", "failed_worker": "w0"})
    net = FakeNet(refusal)
    sender = make_sender(net, master)
    sender.submit([b(0, 0), b(2, 0)])  # partitions 0 and 2 both on (w0, w1): one PUSH
    sender.drain()
    assert net.sent[0].body["batches"] == [[0, 0], [2, 0]]
    assert [c[:2] for c in master.calls] == [(0, 0)]
    assert sender.unacked == 0 and sender.revived == 1
    resent = {tuple(pe) for s in net.sent[1:] for pe in s.body["batches"]}
    assert resent == {(0, 1), (2, 0)}  # partition 0 at its new epoch, partition 2 where it was
    # a refusal naming none of the message's locations (an older worker's form) revives them all
    master = FakeMaster()
    sender = make_sender(FakeNet(HardSplit("old", {"partitions": [0]})), master)
    sender.submit([b(0, 0), b(2, 0)])
    sender.drain()
    assert sorted(c[:2] for c in master.calls) == [(0, 0), (2, 0)]


def test_hard_split_revives_away_from_the_full_worker_and_data_lost_is_raised() -> None:
    # issue 15: a failed location answers HARD_SPLIT (move on) or DATA_LOST (this map lost data)
    master = FakeMaster()
    net = FakeNet(
        HardSplit("disk full", {"partitions": [[0, 0]], "reason": "no disk", "failed_worker": "w0"})
    )
    sender = make_sender(net, master)
    sender.submit([b(0, 0)])
    sender.drain()
    assert master.calls == [(0, 0, "HARD_SPLIT: disk full", ("w0",))]
    assert sender.revived == 1 and sender.unacked == 0
    lost = make_sender(FakeNet(DataLostError.of([0], ["w0"], maps=[[0, 0]])), FakeMaster())
    lost.submit([b(0, 0)])
    with pytest.raises(DataLostError):
        lost.drain()
