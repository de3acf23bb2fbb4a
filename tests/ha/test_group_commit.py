"""The group committer bounds its groups by the log it commits to."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from croupier.core.errors import CroupierError
from croupier.ha.eventlog import MAX_BATCH_BYTES, RECORD_OVERHEAD, MemoryEventLog, batch_bytes
from croupier.ha.filelog import FileEventLog
from croupier.ha.group_commit import GroupCommitter
from croupier.ha.zklog import GROUP_HEADER, RECORD_LENGTH, encode_group


class SmallLog(MemoryEventLog):
    """A memory log that takes groups of at most 200 bytes, and remembers each group."""

    max_batch_bytes = 200

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[list[bytes]] = []

    def append(self, records: Sequence[bytes]) -> int:
        assert batch_bytes(records) <= self.max_batch_bytes, "a group past the log's limit"
        self.groups.append(list(records))
        return super().append(records)


def test_groups_stay_within_the_logs_max_batch_bytes_and_keep_their_order() -> None:
    log = SmallLog()
    committer = GroupCommitter(log)
    done: list[CroupierError | None] = []
    finished = threading.Event()

    def record(error: CroupierError | None) -> None:
        done.append(error)
        if len(done) == len(commands):
            finished.set()

    commands = [[bytes([i]) * (10 + 7 * (i % 5))] * (1 + i % 3) for i in range(60)]
    # everything is queued before the thread starts, so it could all go in one group
    for records in commands:
        committer.submit(records, record)
    committer.start()
    assert finished.wait(10)
    committer.stop()
    assert done == [None] * len(commands)
    assert [r for _, r in log.read()] == [r for records in commands for r in records]
    assert len(log.groups) > 1 and all(batch_bytes(g) <= 200 for g in log.groups)
    # a command's records are never split over two groups
    sizes = [len(records) for records in commands]
    cuts = {sum(len(g) for g in log.groups[: i + 1]) for i in range(len(log.groups))}
    assert cuts <= {sum(sizes[: i + 1]) for i in range(len(sizes))}
    log.close()


def test_each_log_states_its_limit(tmp_path: Path) -> None:
    memory = MemoryEventLog()
    assert memory.max_batch_bytes == MAX_BATCH_BYTES == memory.max_record_bytes + RECORD_OVERHEAD
    memory.close()
    with FileEventLog(str(tmp_path)) as file_log:
        assert file_log.max_batch_bytes == MAX_BATCH_BYTES


def test_a_zookeeper_group_within_max_batch_bytes_fits_its_znode() -> None:
    # the ZooKeeper log's max_batch_bytes is its max_group_bytes: batch_bytes must never count
    # less than the batch znode's encoding
    assert GROUP_HEADER.size + RECORD_LENGTH.size <= RECORD_OVERHEAD
    for group in ([b""], [b"x" * 100], [b"a", b"bb", b"ccc"] * 50):
        assert len(encode_group(1, group)) <= batch_bytes(group)


def test_a_burst_is_queued_at_once_and_still_split_by_the_logs_limit() -> None:
    log = SmallLog()
    committer = GroupCommitter(log)
    committer.start()
    done: list[int] = []
    finished = threading.Event()
    commands = [[bytes([i]) * 30] for i in range(40)]

    def record(i: int) -> Callable[[CroupierError | None], None]:
        def finish(error: CroupierError | None) -> None:
            assert error is None
            done.append(i)
            if len(done) == len(commands):
                finished.set()

        return finish

    with committer.burst():
        for i, records in enumerate(commands[:20]):
            committer.submit(records, record(i))
        with committer.burst():  # nested: the outer block queues it
            committer.submit(commands[20], record(20))
        assert log.groups == []  # nothing queued before the block ends
    for i, records in enumerate(commands[21:], 21):
        committer.submit(records, record(i))
    assert finished.wait(10)
    committer.stop()
    assert done == list(range(len(commands)))  # replies in command order
    assert [r for _, r in log.read()] == [r for records in commands for r in records]
    assert len(log.groups) > 1 and all(batch_bytes(g) <= 200 for g in log.groups)
    log.close()


def test_a_snapshot_given_as_a_function_is_made_on_the_committers_thread() -> None:
    # issue 27: the master's actor hands over the state's JSON; encoding and compressing it
    # (most of a snapshot's ~25 ms) runs on the committer's thread, after the records before it
    log = MemoryEventLog()
    committer = GroupCommitter(log)
    committer.start()
    made_on: list[str] = []

    def make() -> bytes:
        made_on.append(threading.current_thread().name)
        return b"state at 2"

    committer.submit([b"a", b"b"], None)
    committer.submit_snapshot(2, make)
    committer.stop()
    assert made_on == ["group-commit"]
    assert log.latest_snapshot() == (2, b"state at 2")
    log.close()


class BreakingLog(SmallLog):
    """A ``SmallLog`` whose second append fails."""

    def append(self, records: Sequence[bytes]) -> int:
        if len(self.groups) == 1:
            self.groups.append([])
            raise OSError(28, "No space left on device")
        return super().append(records)


def test_parts_go_in_groups_within_the_limit_and_answer_once_after_the_last() -> None:
    log = SmallLog()
    committer = GroupCommitter(log)
    done: list[CroupierError | None] = []
    finished = threading.Event()
    parts = [
        bytes([i]) * (100 - RECORD_OVERHEAD) for i in range(5)
    ]  # 100 bytes as the log counts: 2 per group

    def record(error: CroupierError | None) -> None:
        done.append(error)
        finished.set()

    committer.submit_parts(parts, record)
    committer.start()
    assert finished.wait(10)
    committer.stop()
    assert done == [None]
    assert [r for _, r in log.read()] == parts
    assert [len(g) for g in log.groups] == [2, 2, 1]
    log.close()


def test_a_part_after_a_failed_one_is_not_appended_and_the_error_is_the_answer() -> None:
    log = BreakingLog()
    failures: list[CroupierError] = []
    committer = GroupCommitter(log, on_failure=failures.append)
    done: list[CroupierError | None] = []
    finished = threading.Event()

    def record(error: CroupierError | None) -> None:
        done.append(error)
        finished.set()

    parts = [bytes([i]) * (100 - RECORD_OVERHEAD) for i in range(5)]
    committer.submit_parts(parts, record)
    committer.start()
    assert finished.wait(10)
    committer.stop()
    assert len(done) == 1 and done[0] is not None and done[0].retriable  # the client sends it again
    assert [r for _, r in log.read()] == parts[:2]  # the first group only
    assert len(failures) == 1
    log.close()
