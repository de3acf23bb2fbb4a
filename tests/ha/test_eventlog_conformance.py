"""One conformance suite for every EventLog backend (DESIGN §3: every port has an in-memory twin).

A backend is a ``Backend`` that can open a fresh log and reopen it over the
same storage (the same directory, or the same ``MemoryLogStore``). Adding a
backend means adding a branch to ``Backend.open`` and a name to ``BACKENDS``.

A backend that needs a server (ZooKeeper: ``integration/test_zk_eventlog.py``)
reuses the tests from its own module instead: it imports them and overrides
the ``kind``, ``backend`` and ``backend_factory`` fixtures with a ``Backend``
subclass whose ``open`` opens its kind of log.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from croupier.core.errors import CroupierError, Unavailable
from croupier.ha.eventlog import (
    EventLog,
    LogLocked,
    LogTruncated,
    MemoryEventLog,
    MemoryLogStore,
    replay,
)
from croupier.ha.filelog import FileEventLog

BACKENDS = ["memory", "file"]
# Small segments so that every test also crosses segment boundaries in the file log.
SEGMENT_BYTES = 512


class Backend:
    """Opens logs of one kind over one storage location, and closes them all at teardown."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.store = MemoryLogStore()
        self.opened: list[EventLog] = []

    def open(self) -> EventLog:
        """Open the log over this backend's storage (fresh the first time)."""
        log: EventLog
        if self.kind == "memory":
            log = MemoryEventLog(self.store)
        elif self.kind == "file":
            log = FileEventLog(self.directory, segment_bytes=SEGMENT_BYTES)
        else:  # pragma: no cover
            raise AssertionError(self.kind)
        self.opened.append(log)
        return log

    def reopen(self, log: EventLog) -> EventLog:
        """Simulate a restart: close ``log`` and open the same storage again."""
        log.close()
        return self.open()

    def close_all(self) -> None:
        for log in self.opened:
            log.close()


@pytest.fixture(params=BACKENDS, scope="module")
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def backend(kind: str, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(kind, tmp_path / "eventlog")
    yield b
    b.close_all()


@pytest.fixture(scope="module")
def backend_factory(kind: str) -> Callable[[Path], Backend]:
    """Makes a ``Backend`` over a directory; module-scoped, so the property test may use it."""
    return lambda directory: Backend(kind, directory)


@pytest.fixture
def log(backend: Backend) -> EventLog:
    return backend.open()


def recs(*items: bytes) -> list[bytes]:
    return list(items)


def everything(log: EventLog) -> list[tuple[int, bytes]]:
    snap = log.latest_snapshot()
    return list(log.read(after=snap[0] if snap else 0))


# -- appending and reading --------------------------------------------------------------------


def test_fresh_log_is_empty(log: EventLog) -> None:
    assert isinstance(log, EventLog)
    assert log.last_seq() == 0
    assert list(log.read()) == []
    assert log.latest_snapshot() is None
    assert replay(log) == (None, 0, [])


def test_seqs_are_consecutive_from_one(log: EventLog) -> None:
    assert log.append([b"a"]) == 1
    assert log.append([b"b", b"c"]) == 3
    assert log.append([b"d"]) == 4
    assert log.last_seq() == 4
    assert list(log.read()) == [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]


def test_empty_group_changes_nothing(log: EventLog) -> None:
    assert log.append([]) == 0
    assert log.append([b"x", b"y"]) == 2
    assert log.append([]) == 2
    assert log.last_seq() == 2
    assert [seq for seq, _ in log.read()] == [1, 2]


def test_read_after(log: EventLog) -> None:
    data = [bytes([i]) * i for i in range(1, 8)]
    log.append(data[:3])
    log.append(data[3:])
    for k in range(len(data) + 3):
        assert list(log.read(after=k)) == [(i + 1, d) for i, d in enumerate(data) if i + 1 > k]
    with pytest.raises(ValueError, match="after"):
        log.read(after=-1)


def test_read_sees_the_log_as_of_the_call(log: EventLog) -> None:
    log.append([b"a", b"b"])
    it = log.read()
    log.append([b"c"])
    assert list(it) == [(1, b"a"), (2, b"b")]
    assert list(log.read(after=2)) == [(3, b"c")]


def test_records_are_opaque_bytes(log: EventLog) -> None:
    odd = [b"", bytes(range(256)), b"\x00" * 100, bytearray(b"ba"), memoryview(b"mv")]
    log.append(odd)  # type: ignore[arg-type]  # bytes-like values are accepted too
    got = list(log.read())
    assert [r for _, r in got] == [b"", bytes(range(256)), b"\x00" * 100, b"ba", b"mv"]
    assert all(type(r) is bytes for _, r in got)


def test_bad_group_appends_nothing(log: EventLog) -> None:
    log.append([b"a"])
    with pytest.raises(TypeError, match="bytes"):
        log.append([b"ok", "text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="limit"):
        log.append([b"ok", bytes(log.max_record_bytes + 1)])
    assert log.last_seq() == 1
    assert list(log.read()) == [(1, b"a")]
    assert log.append([b"b"]) == 2


def test_largest_record_is_accepted(log: EventLog) -> None:
    big = b"\xab" * log.max_record_bytes
    assert log.append([big]) == 1
    assert list(log.read()) == [(1, big)]


def test_many_groups(backend: Backend, log: EventLog) -> None:
    expected: list[tuple[int, bytes]] = []
    for g in range(300):
        group = [f"{g}:{i}".encode() * (i + 1) for i in range(g % 4)]
        first = len(expected) + 1
        last = log.append(group)
        expected.extend((first + i, r) for i, r in enumerate(group))
        assert last == len(expected)
    assert list(log.read()) == expected
    log = backend.reopen(log)
    assert log.last_seq() == len(expected)
    assert list(log.read()) == expected
    assert list(log.read(after=len(expected) - 5)) == expected[-5:]


# -- snapshots ------------------------------------------------------------------------------


def test_snapshot_truncates_the_prefix(log: EventLog) -> None:
    log.append([b"1", b"2", b"3"])
    log.append([b"4", b"5"])
    log.write_snapshot(3, b"state@3")
    assert log.latest_snapshot() == (3, b"state@3")
    assert log.last_seq() == 5
    assert list(log.read(after=3)) == [(4, b"4"), (5, b"5")]
    assert list(log.read(after=4)) == [(5, b"5")]
    for after in (0, 1, 2):
        with pytest.raises(LogTruncated, match=rf"records {after + 1}\.\.3 ") as info:
            log.read(after=after)
        assert info.value.details == {"after": after, "snapshot_seq": 3}
        assert isinstance(info.value, CroupierError)
    assert replay(log) == (b"state@3", 3, [(4, b"4"), (5, b"5")])


def test_snapshot_at_last_seq_then_append(backend: Backend, log: EventLog) -> None:
    log.append([b"a", b"b"])
    log.write_snapshot(2, b"S")
    assert list(log.read(after=2)) == []
    assert log.last_seq() == 2
    assert log.append([b"c"]) == 3
    assert list(log.read(after=2)) == [(3, b"c")]
    log = backend.reopen(log)
    assert log.latest_snapshot() == (2, b"S")
    assert list(log.read(after=2)) == [(3, b"c")]


def test_snapshot_of_an_empty_log(backend: Backend, log: EventLog) -> None:
    log.write_snapshot(0, b"")
    assert log.latest_snapshot() == (0, b"")
    assert list(log.read()) == []
    log = backend.reopen(log)
    assert log.latest_snapshot() == (0, b"")
    assert log.append([b"a"]) == 1


def test_snapshot_seq_validation(log: EventLog) -> None:
    log.append([b"a", b"b", b"c"])
    with pytest.raises(ValueError, match="beyond"):
        log.write_snapshot(4, b"x")
    with pytest.raises(ValueError):
        log.write_snapshot(-1, b"x")
    log.write_snapshot(2, b"s2")
    with pytest.raises(ValueError, match="older"):
        log.write_snapshot(1, b"s1")
    assert log.latest_snapshot() == (2, b"s2")
    log.write_snapshot(2, b"s2 again")  # the same seq may be written again
    assert log.latest_snapshot() == (2, b"s2 again")
    log.write_snapshot(3, b"s3")
    assert log.latest_snapshot() == (3, b"s3")
    assert list(log.read(after=3)) == []
    with pytest.raises(LogTruncated):
        log.read(after=2)


def test_snapshot_then_more_snapshots_and_appends(backend: Backend, log: EventLog) -> None:
    seq = 0
    for round_ in range(6):
        for _ in range(20):
            seq = log.append([b"r%d" % round_] * 3)
        log.write_snapshot(seq - 7, b"snap %d" % round_)
    log = backend.reopen(log)
    assert log.latest_snapshot() == (seq - 7, b"snap 5")
    assert [s for s, _ in log.read(after=seq - 7)] == list(range(seq - 6, seq + 1))


# -- lifecycle ------------------------------------------------------------------------------


def test_reopen_keeps_everything(backend: Backend, log: EventLog) -> None:
    log.append([b"a", b"b"])
    log.append([b"c"])
    log.write_snapshot(1, b"S1")
    log.append([b"d", b"e"])
    before = (log.latest_snapshot(), log.last_seq(), everything(log))
    log = backend.reopen(log)
    assert (log.latest_snapshot(), log.last_seq(), everything(log)) == before
    assert log.append([b"f"]) == 6
    log = backend.reopen(log)
    assert everything(log)[-1] == (6, b"f")


def test_reopen_empty_and_unsnapshotted(backend: Backend, log: EventLog) -> None:
    log = backend.reopen(log)
    assert log.last_seq() == 0
    log.append([b"a"])
    log = backend.reopen(log)
    assert list(log.read()) == [(1, b"a")]
    assert log.latest_snapshot() is None


def test_second_open_is_refused_until_close(backend: Backend, log: EventLog) -> None:
    log.append([b"a"])
    with pytest.raises(LogLocked, match="already open") as info:
        backend.open()
    assert isinstance(info.value, Unavailable)
    log.close()
    again = backend.open()
    assert list(again.read()) == [(1, b"a")]


def test_closed_log_refuses_calls(log: EventLog) -> None:
    log.append([b"a"])
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        log.append([b"b"])
    with pytest.raises(ValueError, match="closed"):
        log.read()
    with pytest.raises(ValueError, match="closed"):
        log.last_seq()
    with pytest.raises(ValueError, match="closed"):
        log.write_snapshot(1, b"")
    with pytest.raises(ValueError, match="closed"):
        log.latest_snapshot()


def test_concurrent_appends_and_reads(log: EventLog) -> None:
    errors: list[BaseException] = []
    lasts: list[int] = []
    lasts_lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            for i in range(40):
                last = log.append([b"%d:%d:0" % (w, i), b"%d:%d:1" % (w, i)])
                with lasts_lock:
                    lasts.append(last)
                if i % 10 == 0:
                    seqs = [s for s, _ in log.read()]
                    assert seqs == list(range(1, len(seqs) + 1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(lasts) == list(range(2, 4 * 40 * 2 + 1, 2))
    got = list(log.read())
    assert [s for s, _ in got] == list(range(1, 321))
    # A group's records are adjacent, in order.
    for (_, first), (_, second) in zip(got[::2], got[1::2], strict=True):
        assert first.endswith(b":0")
        assert second == first[:-1] + b"1"


def test_context_manager_closes() -> None:
    with MemoryEventLog() as log:
        log.append([b"a"])
        store = log.store
    with MemoryEventLog(store) as again:
        assert list(again.read()) == [(1, b"a")]
    with tempfile.TemporaryDirectory() as d:
        with FileEventLog(d) as flog:
            flog.append([b"a"])
        with FileEventLog(d) as flog:
            assert list(flog.read()) == [(1, b"a")]


# -- the property: snapshot + tail always equals the model --------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.binary(max_size=40), max_size=5)),
        st.tuples(st.just("snapshot"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("reopen"), st.none()),
        st.tuples(st.just("read"), st.integers(min_value=0, max_value=60)),
    ),
    max_size=30,
)


def fold(records: list[bytes]) -> bytes:
    """A stand-in for the master's state: any injective encoding of the records folded so far."""
    return b"".join(len(r).to_bytes(4, "little") + r for r in records)


# Against ZooKeeper, kazoo's connection thread draws its ping jitter from the global `random`
# (kazoo/protocol/connection.py, each turn of its loop) while hypothesis generates an example in
# this thread: hypothesis then sees the global state change and blames the strategy. Nothing
# here uses `random`.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@settings(max_examples=50, deadline=None, database=None)
@given(ops=_ops)
def test_snapshot_plus_tail_equals_the_model(
    backend_factory: Callable[[Path], Backend], ops: list[tuple[str, object]]
) -> None:
    model: list[bytes] = []
    snap_seq = 0
    with tempfile.TemporaryDirectory() as d:
        b = backend_factory(Path(d))
        try:
            log = b.open()
            for op, arg in ops:
                if op == "append":
                    assert isinstance(arg, list)
                    assert log.append(arg) == len(model) + len(arg)
                    model.extend(arg)
                elif op == "snapshot":
                    assert isinstance(arg, float)
                    seq = snap_seq + int(arg * (len(model) - snap_seq))
                    log.write_snapshot(seq, fold(model[:seq]))
                    snap_seq = seq
                elif op == "reopen":
                    log = b.reopen(log)
                else:
                    assert isinstance(arg, int)
                    if arg < snap_seq:
                        with pytest.raises(LogTruncated):
                            log.read(after=arg)
                    else:
                        assert list(log.read(after=arg)) == list(enumerate(model, 1))[arg:]

                assert log.last_seq() == len(model)
                data, seq, tail = replay(log)
                assert seq == snap_seq
                assert (data or b"") == fold(model[:seq])
                assert fold(model[:seq]) + fold([r for _, r in tail]) == fold(model)
                assert [s for s, _ in tail] == list(range(seq + 1, len(model) + 1))
        finally:
            b.close_all()
