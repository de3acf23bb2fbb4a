"""The state a worker keeps per location, per seal and per reservation is counted against its
``--memory`` (issue 13): past the held share, new locations and reservations are refused as
``CONGESTED`` instead of growing the worker, and DESTROY gives the bytes back.

Talks the wire protocol to a real ``WorkerService`` (in process) with a 1 MiB cap: at
about 4 KiB a location, a few hundred locations fill it, where only their seals' 36 bytes
each used to be counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from croupier.core.batch import FLAG_SEAL, BatchHeader
from croupier.core.codec import to_json
from croupier.core.config import WorkerConfig
from croupier.core.dataplane import Destroy, Push, Reserve
from croupier.core.errors import Congested
from croupier.core.wire import MsgType
from croupier.services.worker import WorkerService
from croupier.transports.digest import batch_digest
from croupier.transports.rpc import RpcClient
from tests.sdk.fakes import start_master

APP = "budget-app"
CAP = 1 << 20
PARTITIONS = 20_000


@dataclass
class Worker:
    service: WorkerService
    push: RpcClient
    control: RpcClient

    def reserve(self, shuffle: int) -> None:
        body = Reserve(
            APP, shuffle, self.service.incarnation, PARTITIONS, False, ((self.service.worker_id, None),)
        )
        self.control.call(int(MsgType.RESERVE), to_json(body))

    def seal(self, shuffle: int, partitions: range, map_id: int = 0) -> None:
        """One PUSH with a seal of ``map_id`` for each of ``partitions``."""
        header = BatchHeader(map_id, 0, 0, 0, FLAG_SEAL, batch_digest(map_id, 0, 0, FLAG_SEAL, b"")).encode()
        where = tuple((p, 0) for p in partitions)
        body = Push(APP, shuffle, self.service.incarnation, where)
        self.push.call(int(MsgType.PUSH), to_json(body), [header * len(where), *([b""] * len(where))])

    def info(self) -> dict[str, Any]:
        return self.control.call(int(MsgType.WORKER_INFO)).body


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    master = start_master()
    # reserved by hand, not by this master: wait out the first heartbeat's orphan sweep
    config = WorkerConfig(memory_cap=CAP, heartbeat_interval=3600)
    service = WorkerService(master.url, [tmp_path / "w"], config=config)
    try:
        service.start()
        deadline = time.monotonic() + 10
        while (master.describe().commands or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        urls = service.urls
        push = RpcClient(urls["push"], timeout=10, retries=0)
        control = RpcClient(urls["control"], timeout=10, retries=0)
        try:
            yield Worker(service, push, control)
        finally:
            push.close()
            control.close()
    finally:
        service.stop()
        master.stop()


def fill(worker: Worker, shuffle: int) -> int:
    """Seal new partitions of ``shuffle``, 10 per PUSH, until the worker refuses; the count taken."""
    for lo in range(0, PARTITIONS, 10):
        try:
            worker.seal(shuffle, range(lo, lo + 10))
        except Congested:
            return lo
    raise AssertionError(f"{PARTITIONS} new locations with seals were all taken under a {CAP}-byte cap")


def settle(worker: Worker, want: int) -> dict[str, Any]:
    """WORKER_INFO once its ``memory_used`` is ``want`` (the actors release asynchronously)."""
    deadline = time.monotonic() + 10
    while (info := worker.info())["memory_used"] != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return info


def test_new_locations_past_the_held_share_are_refused_and_counted(worker: Worker) -> None:
    worker.reserve(1)
    taken = fill(worker, 1)
    info = worker.info()
    assert info["live_locations"] == taken
    # each location counts its state (kilobytes), not only its seal's 36 bytes
    assert info["memory_used"] >= taken * 1024
    assert info["memory_used"] <= CAP
    # the locations already there still take data; a new shuffle is refused whole
    worker.seal(1, range(0, 10), map_id=1)
    with pytest.raises(Congested):
        worker.reserve(2)
    assert worker.info()["live_locations"] == taken


def test_destroy_gives_the_state_back(worker: Worker) -> None:
    worker.reserve(1)
    taken = fill(worker, 1)
    worker.control.call(int(MsgType.DESTROY), to_json(Destroy(APP, 1)))
    info = settle(worker, 0)
    assert (info["memory_used"], info["live_locations"]) == (0, 0)
    worker.reserve(1)
    assert fill(worker, 1) == taken  # as many fit again


def test_a_seal_sent_again_is_counted_once(worker: Worker) -> None:
    worker.reserve(1)
    worker.seal(1, range(0, 10))
    once = worker.info()["memory_used"]  # taken with the push, before its reply
    assert once >= 10 * 1024
    worker.seal(1, range(0, 10))  # the same seals: only their 36-byte headers are buffered again
    assert settle(worker, once + 10 * 36)["memory_used"] == once + 10 * 36
