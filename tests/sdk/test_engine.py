"""``croupier.engine.map_reduce`` on real executor processes (issue 16 item 5).

Every test here spawns executor processes; the word count also starts an embedded cluster
of worker processes (no ``url``), the others share one cluster of worker processes (with a secret).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
import croupier.engine
from croupier.engine import TaskEvent, TaskFailed, map_reduce
from croupier.services.local import LocalCluster

pytestmark = pytest.mark.integration

WORDS = ["shuffle", "map", "reduce", "croupier", "epoch", "seal", "batch", "chunk", "ünïcode", "a"]


def _corpus(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(0, 40))) for _ in range(lines)]


def _words(line: str) -> Iterator[tuple[str, int]]:
    for word in line.split():
        yield word, 1


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalCluster(2, tmp_path_factory.mktemp("engine"), processes=True) as cluster:
        yield cluster.master_url


def test_word_count_on_an_embedded_cluster_matches_counter_and_mappers_exit_first() -> None:
    lines = _corpus(400, seed=7)
    chunks = ["\n".join(lines[i : i + 50]) for i in range(0, len(lines), 50)]  # 8 map tasks
    events: list[TaskEvent] = []
    alive_at_first_reduce: list[int] = []

    def on_task(event: TaskEvent) -> None:
        if event.kind == "reduce" and event.event == "start" and not alive_at_first_reduce:
            mappers = {e.pid for e in events if e.kind == "map"}
            alive_at_first_reduce.extend(p for p in mappers if os.path.exists(f"/proc/{p}"))
            alive_at_first_reduce.append(-1)  # checked
        events.append(event)

    counts = map_reduce(
        chunks, _words, lambda word, ones: sum(ones), num_partitions=4, executors=2, on_task=on_task
    )

    assert counts == Counter(word for line in lines for word in line.split())
    maps = [e for e in events if e.kind == "map"]
    reduces = [e for e in events if e.kind == "reduce"]
    for e in maps + reduces:
        if e.event == "exit":
            print(f"{e.kind} task {e.index} pid {e.pid} exited with {e.exitcode} at {e.time:.3f}")
    first_reduce = min(e.time for e in reduces if e.event == "start")
    print(f"first reducer started at {first_reduce:.3f}")
    assert {e.index for e in maps if e.event == "exit" and e.exitcode == 0} == set(range(8))
    assert max(e.time for e in maps if e.event == "exit") <= first_reduce
    assert alive_at_first_reduce == [-1]  # every mapper process was gone when a reducer started
    assert len({e.pid for e in events}) == len(events) // 2  # a fresh process per task
    assert _most_alive(events) <= 2


def _most_alive(events: list[TaskEvent]) -> int:
    alive, most = 0, 0
    for e in sorted(events, key=lambda e: (e.time, e.event == "start")):
        alive += 1 if e.event == "start" else -1
        most = max(most, alive)
    return most


def test_closures_and_lambdas_travel_with_cloudpickle(url: str) -> None:
    stop = {"the", "a"}  # captured by the closure below, shipped by value
    weights = {"x": 10}

    def weighted(pair: tuple[str, int]) -> Iterator[tuple[tuple[str, int], int]]:
        word, n = pair
        if word not in stop:
            yield (word, n % 2), weights.get(word, 1) * n

    inputs = [("x", 1), ("y", 2), ("the", 3), ("x", 3), ("y", 5), ("a", 9)]
    out = map_reduce(
        inputs, weighted, lambda key, values: sorted(values), num_partitions=3, executors=2, url=url
    )
    assert out == {("x", 1): [10, 30], ("y", 0): [2], ("y", 1): [5]}


def test_values_that_only_cloudpickle_can_take_reach_the_reducer(url: str) -> None:
    def shipped(n: int) -> Iterator[tuple[int, object]]:
        yield n % 2, lambda x: x * n

    out = map_reduce(range(4), shipped, lambda key, fns: sorted(f(1) for f in fns), num_partitions=2, url=url)
    assert out == {0: [0, 2], 1: [1, 3]}


def test_3000_inputs_make_a_few_map_tasks_not_3000_processes(url: str) -> None:
    """Issue 22 §4: the inputs are split into ``num_maps`` tasks (default 4 per executor),
    as Spark's ``parallelize`` makes partitions; ``map_fn`` still runs once per item. It ran
    one executor process per input item before (3,000 processes, ~25 minutes)."""
    lines = _corpus(3000, seed=22)
    events: list[TaskEvent] = []
    counts = map_reduce(
        lines, _words, lambda w, ones: sum(ones), num_partitions=4, url=url, on_task=events.append
    )
    assert counts == Counter(word for line in lines for word in line.split())
    starts = [e for e in events if e.kind == "map" and e.event == "start"]
    assert sorted(e.index for e in starts) == list(range(croupier.engine.MAPS_PER_EXECUTOR * 2))


def test_num_maps_splits_the_inputs_into_that_many_slices_each_item_once(url: str) -> None:
    events: list[TaskEvent] = []
    out = map_reduce(
        range(10),
        lambda n: [("n", n)],
        lambda k, v: sorted(v),
        num_partitions=2,
        url=url,
        num_maps=3,
        on_task=events.append,
    )
    assert out == {"n": list(range(10))}
    assert sorted(e.index for e in events if e.kind == "map" and e.event == "start") == [0, 1, 2]
    with pytest.raises(ValueError, match="num_maps"):
        map_reduce(range(3), lambda n: [(n, n)], lambda k, v: v, url=url, num_maps=0)


def test_a_failing_map_task_raises_a_clear_error(url: str) -> None:
    def bad(n: int) -> Iterator[tuple[int, int]]:
        if n == 2:
            raise ValueError(f"input {n} is bad")
        yield n, n

    with pytest.raises(TaskFailed) as info:
        map_reduce(range(4), bad, lambda k, v: v, num_partitions=2, url=url, task_attempts=1)
    err = info.value
    assert (err.kind, err.index, err.attempts) == ("map", 2, 1)
    assert "map task 2 failed" in str(err)
    assert "ValueError: input 2 is bad" in str(err)
    assert "in bad" in err.remote_traceback  # the executor's own traceback
    assert isinstance(err.__cause__, ValueError)


def test_an_unsupported_key_fails_its_map_task_naming_the_type(url: str) -> None:
    with pytest.raises(TaskFailed, match="got list"):
        map_reduce([1], lambda n: [([n], n)], lambda k, v: v, num_partitions=2, url=url, task_attempts=1)


def test_an_executor_that_dies_is_retried_with_a_new_attempt(url: str, tmp_path: Path) -> None:
    marker = tmp_path / "died-once"

    def dies_once(n: int) -> Iterator[tuple[str, int]]:
        yield "n", n
        if n == 1 and not marker.exists():
            marker.touch()
            os._exit(3)  # the executor process dies mid-map, its writer never closed

    events: list[TaskEvent] = []
    out = map_reduce(
        range(3), dies_once, lambda k, v: sorted(v), num_partitions=2, url=url, on_task=events.append
    )
    assert out == {"n": [0, 1, 2]}  # the dead attempt's records are not read
    exits = [(e.index, e.attempt, e.exitcode) for e in events if e.kind == "map" and e.event == "exit"]
    assert (1, 0, 3) in exits
    assert (1, 1, 0) in exits


def test_a_task_that_keeps_dying_names_its_exit_code(url: str) -> None:
    def always(n: int) -> Iterator[tuple[int, int]]:
        os._exit(5)
        yield n, n  # type: ignore[unreachable]  # pragma: no cover

    with pytest.raises(TaskFailed, match="exited with code 5 and no result") as info:
        map_reduce([0], always, lambda k, v: v, num_partitions=1, url=url, task_attempts=2)
    assert info.value.attempts == 2


def test_a_reduce_task_s_data_lost_error_keeps_its_details(url: str) -> None:
    def lost(key: int, values: list[int]) -> int:
        raise croupier.DataLostError.of([key], ["w1", "w2"], "simulated", maps=[[key, key], [3, key]])

    with pytest.raises(TaskFailed) as info:
        map_reduce([0], lambda n: [(n, n)], lost, num_partitions=1, url=url, task_attempts=1, recoveries=0)
    err = info.value
    assert err.kind == "reduce"
    assert isinstance(err.__cause__, croupier.DataLostError)
    assert err.__cause__.details["maps"] == [[0, 0], [3, 0]]  # exceptions pickle their args only
    assert err.lost_maps == [0, 3]


def test_the_engine_is_exported_lazily() -> None:
    assert croupier.engine.map_reduce is map_reduce
