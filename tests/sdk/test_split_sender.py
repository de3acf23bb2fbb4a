"""The sender's answers to splits (PROTOCOL §5.2), against the fake transport and master
of ``test_sender``: a ``HARD_SPLIT`` is revived now and resent, blaming nobody and not
counted as a failure; a soft split is acked, revived in the background while pushes go on
to the old epoch, and the following batches go to the new one."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from croupier._routing import PartitionLocation
from croupier.core.errors import CroupierError, HardSplit, Unavailable
from croupier.transports.rpc import Reply
from tests.sdk.test_sender import FakeMaster, FakeNet, Sent, b, make_sender

HARD = HardSplit("decommissioning", {"partitions": [[0, 0]], "reason": "the worker is decommissioning"})


class SplitNet(FakeNet):
    """Like ``FakeNet``; a dict in the script is an OK reply with that body."""

    def send(self, url: str, msg_type: int, body: dict[str, Any], payloads: Any, callback: Any) -> None:
        if self.script and isinstance(self.script[0], dict):
            reply = self.script.pop(0)
            assert isinstance(reply, dict)
            self.sent.append(Sent(url, msg_type, body, list(payloads), callback))
            callback(Reply(reply, []), None)
            return
        super().send(url, msg_type, body, payloads, callback)


class SlowMaster(FakeMaster):
    """Revives only once ``release`` is set, so a test sees the pushes made meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.revived = threading.Event()

    def revive(self, partition: int, epoch: int, reason: str, failed: tuple[str, ...]) -> PartitionLocation:
        assert self.release.wait(10)
        location = super().revive(partition, epoch, reason, failed)
        self.revived.set()
        return location


def test_a_hard_split_revives_now_blames_nobody_and_resends_the_same_batches() -> None:
    master = FakeMaster()
    net = FakeNet(HARD, HARD)
    sender = make_sender(net, master, max_revives=1)  # two hard splits: not failures
    sender.submit([b(0, 0), b(0, 1)])
    sender.drain()
    assert [(c[0], c[1], c[3]) for c in master.calls] == [(0, 0, ()), (0, 1, ())]
    assert master.calls[0][2].startswith("HARD_SPLIT: ")
    assert [s.url for s in net.sent] == [
        "tcp://127.0.0.1:7000",
        "tcp://127.0.0.1:7003",
        "tcp://127.0.0.1:7004",
    ]
    assert net.sent[2].body["batches"] == [[0, 2], [0, 2]]
    assert [h.encode() for h in net.sent[2].headers()] == [h.encode() for h in net.sent[0].headers()]
    assert sender.unacked == 0 and sender.revived == 2


def test_hard_splits_have_a_limit_of_their_own() -> None:
    sender = make_sender(FakeNet(*[HARD] * 5), max_split_revives=3)
    sender.submit([b(0, 0)])
    with pytest.raises(Unavailable, match="3 revives"):
        sender.drain()


def test_a_soft_split_is_acked_revived_in_the_background_and_later_batches_move() -> None:
    master = SlowMaster()
    net = SplitNet({"soft_split": [[0, 0]]}, {"soft_split": [[0, 0]]})
    sender = make_sender(net, master)
    sender.submit([b(0, 0)])
    sender.poll()
    assert sender.unacked == 0 and sender.soft_splits == 1  # acked: nothing is resent
    sender.submit([b(0, 1)])  # the revive is still waiting: the old epoch takes it
    sender.poll()
    assert [s.url for s in net.sent] == ["tcp://127.0.0.1:7000"] * 2
    assert sender.soft_splits == 1  # the second soft answer found the revive running
    master.release.set()
    assert master.revived.wait(10)
    sender.submit([b(0, 2)])
    sender.drain()  # also ends the soft-split thread
    assert net.sent[2].url == "tcp://127.0.0.1:7003" and net.sent[2].body["batches"] == [[0, 1]]
    assert len(master.calls) == 1 and master.calls[0][3] == ()
    assert master.calls[0][2].startswith("SOFT_SPLIT: ")
    assert sender.unacked == 0 and not [t for t in threading.enumerate() if t.name.startswith("soft-split")]


def test_a_soft_split_of_an_epoch_already_moved_past_is_not_revived_again() -> None:
    master = FakeMaster()
    net = SplitNet({"soft_split": [[0, 0]]}, {"soft_split": [[0, 0]]})
    sender = make_sender(net, master, merge_size=1)
    sender.submit([b(0, 0)])
    sender.drain()
    sender.submit([b(0, 1)])  # to epoch 1 now; a late soft answer about epoch 0 is old news
    sender.drain()
    assert len(master.calls) == 1


def test_a_failed_soft_revive_is_only_logged_and_asked_again_at_the_next_answer() -> None:
    calls: list[int] = []

    def revive(partition: int, epoch: int, reason: str, failed: tuple[str, ...]) -> PartitionLocation:
        calls.append(epoch)
        raise CroupierError("master away")

    net = SplitNet({"soft_split": [[0, 0]]}, {"soft_split": [[0, 0]]})
    sender = make_sender(net, FakeMaster())
    sender._revive = revive
    sender.submit([b(0, 0)])
    sender.drain()
    sender.submit([b(0, 1)])
    sender.drain()
    assert calls == [0, 0] and sender.unacked == 0
