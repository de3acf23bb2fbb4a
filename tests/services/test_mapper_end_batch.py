"""MAPPER_END_BATCH over RPC: each entry answered as its own MAPPER_END would be, its winners
logged as one event that a restart folds into the same state."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.errors import BadRequest, CroupierError, Unavailable
from croupier.core.events import decode_event
from croupier.core.replies import MapperEndReply, mapper_end_results
from croupier.core.state import MasterState, apply
from croupier.core.wire import MsgType
from croupier.ha.eventlog import MemoryEventLog, batch_bytes
from croupier.services.master import MasterService
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient, RpcServer
from tests.services.test_master import FailingLog, FakeClock, quiet_config

APP_BITMAP = encode_bitmap(from_partitions([0, 2], 4))
ENTRIES = (
    (0, 0, 2, APP_BITMAP),
    (1, 0, 2, APP_BITMAP),
    (0, 1, 2, APP_BITMAP),  # a second attempt of map 0: it loses
    (99, 0, 2, APP_BITMAP),  # out of range: refused, alone
    (2, 0, 3, APP_BITMAP),  # touched does not match the bitmap: refused, alone
    (2, 0, 2, APP_BITMAP),
    (0, 0, 2, APP_BITMAP),  # a retry of the winner: it won
)


@pytest.fixture
def worker_port() -> Iterator[int]:
    """The control port of a worker that acks every RESERVE (a placement waits for them)."""
    with RpcServer("tcp://127.0.0.1:0", lambda _req, responder: responder.ok({}), name="w") as worker:
        yield int(worker.url.rsplit(":", 1)[1])


def setup_app(client: MasterClient, port: int) -> str:
    client.call(c.RegisterWorker("w0", "127.0.0.1", port, 2, 3, 4, 100, "i0"))
    app = client.call(c.RegisterApp("job"))["app_id"]
    assert isinstance(app, str)
    return app


def _outcome(result: MapperEndReply | CroupierError) -> Any:
    return (type(result).__name__, result.message) if isinstance(result, CroupierError) else result


def _master(tmp_path: Path, name: str) -> MasterService:
    return MasterService(
        "tcp://127.0.0.1:0", tmp_path / name, config=quiet_config(), clock=FakeClock(), rng=random.Random(1)
    )


def test_a_batch_answers_and_logs_what_each_mapper_end_would(tmp_path: Path, worker_port: int) -> None:
    with _master(tmp_path, "one") as one, MasterClient(one.url, timeout=10) as cl:
        app = setup_app(cl, worker_port)
        cl.call(c.RegisterShuffle(app, 4, 4, shuffle_id=0, replicate=False))  # one map never ends: no commit
        singles = []
        for m, a, t, p in ENTRIES:
            try:
                singles.append(_outcome(cl.request(c.MapperEnd(app, 0, m, a, t, p), MapperEndReply)))
            except CroupierError as exc:
                singles.append(_outcome(exc))
        expected_shuffle = cl.call(c.GetShuffle(app, 0))
    with _master(tmp_path, "batch") as batch, MasterClient(batch.url, timeout=10) as cl:
        app2 = setup_app(cl, worker_port)
        assert app2 == app  # the same rng: the same ids, so the logs can be compared
        cl.call(c.RegisterShuffle(app, 4, 4, shuffle_id=0, replicate=False))  # one map never ends: no commit
        before = batch.describe().seq
        assert before is not None
        body = cl.call(c.MapperEndBatch(app, 0, ENTRIES))
        assert batch.describe().seq == before + 1  # its three winners are one event, one record (issue 27)
        got = [_outcome(r) for r in mapper_end_results(body, len(ENTRIES))]
        assert got == singles
        assert got[2] == MapperEndReply(0, False, False) and got[3][0] == "BadRequest"
        assert cl.call(c.GetShuffle(app, 0)) == expected_shuffle
        records = batch.describe().seq
    # the log holds the same events: a restart folds them into the same state
    with _master(tmp_path, "batch") as again, MasterClient(again.url, timeout=10) as cl:
        assert again.describe().seq == records
        assert cl.call(c.GetShuffle(app, 0)) == expected_shuffle


def test_a_batch_of_an_unknown_shuffle_refuses_each_entry(tmp_path: Path, worker_port: int) -> None:
    with _master(tmp_path, "m") as m, MasterClient(m.url, timeout=10) as cl:
        app = setup_app(cl, worker_port)
        body = cl.call(c.MapperEndBatch(app, 7, ENTRIES[:2]))
        results = mapper_end_results(body, 2)
        assert all(isinstance(r, CroupierError) and r.code == "UNKNOWN_SHUFFLE" for r in results)


@pytest.mark.parametrize(
    ("ends", "match"),
    [
        ([], "ends lists 1 to 1000"),
        ([[0, 0, 2, APP_BITMAP]] * 1001, "ends lists 1 to 1000"),
        ([[0, 0, 2, APP_BITMAP], [0, 0, 2]], r"ends\[1\]"),
        ([[0, 0, 2, "not base64!"]], r"ends\[0\]"),
    ],
)
def test_a_malformed_batch_is_refused_whole(
    tmp_path: Path, worker_port: int, ends: list[Any], match: str
) -> None:
    with _master(tmp_path, "m") as m, MasterClient(m.url, timeout=10) as cl:
        app = setup_app(cl, worker_port)
        cl.call(c.RegisterShuffle(app, 4, 4, shuffle_id=0, replicate=False))  # one map never ends: no commit
        with RpcClient(m.url, timeout=10, retries=0) as raw, pytest.raises(BadRequest, match=match):
            raw.call(int(MsgType.MAPPER_END_BATCH), {"app_id": app, "shuffle_id": 0, "ends": ends})
        assert cl.call(c.GetShuffle(app, 0))["mappers_ended"] == 0  # nothing of it was decided


def test_a_master_that_cannot_log_fails_the_whole_batch_and_its_retry_wins(
    tmp_path: Path, worker_port: int
) -> None:
    log = FailingLog()
    with (
        MasterService("tcp://127.0.0.1:0", config=quiet_config(), clock=FakeClock(), event_log=log) as m,
        MasterClient(m.url, attempts=1, deadline=0) as cl,
    ):
        app = setup_app(cl, worker_port)
        cl.call(c.RegisterShuffle(app, 4, 4, shuffle_id=0, replicate=False))  # one map never ends: no commit
        log.broken = True
        with pytest.raises(Unavailable):
            cl.call(c.MapperEndBatch(app, 0, ENTRIES[:2]))
        log.broken = False
        for _ in range(100):  # the master reloads from its log after the failed append
            try:
                body = cl.call(c.MapperEndBatch(app, 0, ENTRIES[:2]))
                break
            except Unavailable:
                threading.Event().wait(0.05)
        assert mapper_end_results(body, 2) == [MapperEndReply(0, True, False), MapperEndReply(0, True, False)]
    log.close()


def test_concurrent_writers_of_one_client_share_requests_and_each_gets_its_own_reply(
    tmp_path: Path, worker_port: int
) -> None:
    n = 24
    with _master(tmp_path, "m") as m, MasterClient(m.url, timeout=10) as cl:
        app = setup_app(cl, worker_port)
        cl.call(c.RegisterShuffle(app, n + 1, 4, shuffle_id=0, replicate=False))  # one never ends: no commit
        start = threading.Barrier(n + 2)
        out: dict[int, Any] = {}

        def end(i: int) -> None:
            # writers 0..n-1 end maps 0..n-1; writer n ends map 0 again (another attempt) and
            # writer n+1 a map out of range
            map_id = {n: 0, n + 1: 500}.get(i, i)
            start.wait()
            try:
                out[i] = cl.request(c.MapperEnd(app, 0, map_id, i, 2, APP_BITMAP), MapperEndReply)
            except CroupierError as exc:
                out[i] = exc

        threads = [threading.Thread(target=end, args=(i,)) for i in range(n + 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winner0 = out[0].winner  # writers 0 and n raced for map 0: the first logged won
        assert winner0 in (0, n)
        assert out[0].won == (winner0 == 0) and out[n] == MapperEndReply(
            winner0, winner0 == n, out[n].all_ended
        )
        for i in range(1, n):
            assert out[i] == MapperEndReply(i, True, out[i].all_ended)
        assert isinstance(out[n + 1], BadRequest) and "out of range" in out[n + 1].message
        summary = cl.call(c.GetShuffle(app, 0))
        assert summary["mappers_ended"] == n
        assert cl.ends.requests < n + 2  # some of them went together


class SmallGroupLog(MemoryEventLog):
    """A memory log that takes groups of at most 400,000 bytes, as ZooKeeper's takes 900 KiB."""

    max_batch_bytes = 400_000

    def append(self, records: Sequence[bytes]) -> int:
        if batch_bytes(records) > self.max_batch_bytes:
            raise ValueError(f"a group of {batch_bytes(records)} bytes is over {self.max_batch_bytes}")
        return super().append(records)


def test_a_batch_whose_winners_outgrow_one_group_of_the_log_is_logged_in_several(worker_port: int) -> None:
    """16 winners of a 200,000-partition shuffle: 33 KB of bitmap each, 530 KB of events in
    all, more than one group of the log holds (each event alone fits)."""
    partitions = 200_000
    log = SmallGroupLog()
    with (
        MasterService("tcp://127.0.0.1:0", config=quiet_config(), clock=FakeClock(), event_log=log) as m,
        MasterClient(m.url, timeout=30, attempts=1) as cl,
    ):
        app = setup_app(cl, worker_port)
        cl.call(c.RegisterWorker("w1", "127.0.0.1", worker_port, 2, 3, 4, 1_000_000, "i1"))
        cl.call(c.RegisterShuffle(app, 16, partitions, shuffle_id=0, replicate=False))
        full = encode_bitmap(from_partitions(range(partitions), partitions))
        body = cl.call(c.MapperEndBatch(app, 0, tuple((m, 0, partitions, full) for m in range(16))))
        assert [r.won for r in mapper_end_results(body, 16)] == [True] * 16  # type: ignore[union-attr]
    state = MasterState()  # and the log holds every winner
    for _, data in log.read(0):
        apply(state, decode_event(data))
    assert len(state.shuffles[(app, 0)].winners) == 16
    log.close()
