"""Abnormal-app throttling on a worker's push port: ``AppThrottle`` behind ``PushHandler`` and a
real push server, on a clock the test moves. A flooding app gets ``CONGESTED`` (throttled)
while another app's pushes are taken; the throttle lifts once the flooder's rate falls."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.actors.flusher import FlusherActor
from croupier.actors.partition_actor import PartitionActor
from croupier.core.codec import to_json
from croupier.core.dataplane import Push, Reserve
from croupier.core.errors import Congested
from croupier.core.wire import MsgType
from croupier.dataplane.identity import Identity
from croupier.dataplane.locations import Locations
from croupier.dataplane.push import PushHandler
from croupier.dataplane.reservations import Reservations
from croupier.dataplane.throttle import AppThrottle
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import MemoryPartitionStore
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.rpc import RpcClient, RpcServer
from tests.storage.helpers import batch

ME = Identity("worker-1", "inc-1")
APPS = ("flood", "quiet")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Worker:
    clock: Clock
    throttle: AppThrottle
    limiter: MemoryLimiter
    client: RpcClient


@pytest.fixture
def worker() -> Iterator[Worker]:
    store = MemoryPartitionStore()
    limiter = MemoryLimiter(10_000_000)
    flusher = FlusherActor.start(0, limiter)
    locations = Locations(limiter)
    locations.open(1, lambda: PartitionActor.start(store, [flusher], limiter))
    replicator = AsyncRpcClient(timeout=10)
    replicator.start()
    reservations = Reservations(ME)
    for app in APPS:
        reservations.reserve(Reserve(app, 0, ME.incarnation, 4, False, pairs=(("worker-1", None),)))
    clock = Clock()
    # a 10 s window of 1 s counters; throttled over 3000 B/s and z 3
    throttle = AppThrottle(10.0, 3000, 3.0, buckets=10, clock=clock)
    handler = PushHandler(ME, locations, reservations, limiter, replicator, throttle=throttle)
    server = RpcServer("tcp://127.0.0.1:0", handler.on_push, allowed_types=[int(MsgType.PUSH)])
    server.start()
    client = RpcClient(server.url, timeout=10, retries=0)
    try:
        yield Worker(clock, throttle, limiter, client)
    finally:
        client.close()
        server.stop()
        replicator.stop()
        for ref in locations.all():
            ref.stop()
        flusher.stop()
        store.close()


_batch_ids = itertools.count()


def push(worker: Worker, app: str, size: int) -> None:
    """PUSH one batch of ``size`` bytes (36 more with its header) for ``app``."""
    _, raw = batch(1, 0, next(_batch_ids), b"x" * size)
    body = Push(app, 0, ME.incarnation, ((0, 0),), None)
    worker.client.call(int(MsgType.PUSH), to_json(body), [raw[:36], raw[36:]])


def refused(worker: Worker, app: str) -> Congested | None:
    try:
        push(worker, app, 100)
    except Congested as exc:
        return exc
    return None


def test_a_flooding_app_is_throttled_while_another_app_proceeds_until_its_rate_falls(
    worker: Worker,
) -> None:
    push(worker, "quiet", 64)  # 100 bytes with the header
    for _ in range(10):
        push(worker, "flood", 1964)  # 20 kB in the first second
    worker.clock.now = 1001.0  # flood: 20 kB/s against quiet's 100 B/s
    caught = refused(worker, "flood")
    assert caught is not None and caught.details["throttled"] is True
    assert caught.details["app_id"] == "flood" and caught.details["rate"] == 20_000
    assert caught.details["z"] > 3 and "throttled" in caught.message
    used = worker.limiter.used
    assert refused(worker, "quiet") is None  # the other app's pushes are taken
    assert worker.limiter.used == used + 136
    for second in range(2, 7):  # 20 kB over 6 s is 3333 B/s: still over the floor
        worker.clock.now = 1000.0 + second
        assert refused(worker, "flood") is not None, second
        assert refused(worker, "quiet") is None
    worker.clock.now = 1007.0  # the refused pushes were not counted: 20 kB over 7 s is under 3000 B/s
    assert refused(worker, "flood") is None
    assert set(worker.throttle.throttled) == set()


def test_an_app_alone_is_never_throttled_and_uniform_apps_are_not(worker: Worker) -> None:
    for _ in range(10):
        push(worker, "flood", 1964)
    worker.clock.now = 1001.0
    assert refused(worker, "flood") is None  # 20 kB/s, but no other app to protect
    worker.clock.now = 1100.0  # the window has forgotten it
    for _ in range(10):
        push(worker, "flood", 1964)
        push(worker, "quiet", 1964)
    worker.clock.now = 1101.0  # both at 20 kB/s
    assert refused(worker, "flood") is None and refused(worker, "quiet") is None


def test_rates_cover_the_window_and_idle_apps_are_forgotten() -> None:
    clock = Clock()
    throttle = AppThrottle(10.0, 1000, 3.0, buckets=10, clock=clock)
    for i in range(100):
        throttle.record(f"app-{i}", 1000)
    clock.now = 1004.5
    throttle.record("app-0", 3500)  # now 4500 bytes over 4.5 s
    throttle.evaluate(clock.now)
    assert throttle.rates["app-0"] == 1000.0 and len(throttle.rates) == 100
    clock.now = 1010.0  # the first second's counter left the window; app-0's 3500 bytes are left
    throttle.evaluate(clock.now)
    assert set(throttle.rates) == {"app-0"} and len(throttle._apps) == 1
    assert throttle.rates["app-0"] == pytest.approx(3500 / 9)
    clock.now = 1020.0
    throttle.evaluate(clock.now)
    assert throttle.rates == {} and throttle._apps == {}


def test_settings_are_checked() -> None:
    for window, floor, z in ((0.0, 1, 3), (1.0, 0, 3), (1.0, 1, 0)):
        with pytest.raises(ValueError):
            AppThrottle(window, floor, z)


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=30.0),
            st.sampled_from(["a", "b", "c"]),
            st.integers(1, 10**6),
            st.booleans(),
        ),
        max_size=60,
    )
)
def test_window_bytes_are_the_pushes_of_the_buckets_in_the_window(
    steps: list[tuple[float, str, int, bool]],
) -> None:
    # a brute-force reference: every push's bucket and bytes, summed over the window's buckets
    clock = Clock()
    throttle = AppThrottle(10.0, 1e15, 3.0, buckets=5, clock=clock)
    pushed: list[tuple[int, str, int]] = []
    for dt, app, nbytes, evaluate in steps:
        clock.now += dt
        throttle.record(app, nbytes)
        pushed.append((int(clock.now // 2.0), app, nbytes))
        if not evaluate:
            continue
        throttle.evaluate(clock.now)
        oldest = int(clock.now // 2.0) - 4
        expected: dict[str, int] = {}
        for bucket, who, n in pushed:
            if bucket >= oldest:
                expected[who] = expected.get(who, 0) + n
        assert {a: c.total for a, c in throttle._apps.items()} == expected
