"""``croupier.ops.api``: the status page's events and throughput from successive samples."""

from __future__ import annotations

from typing import Any

from croupier.ops.api import History, Sample, diff_events


def status(**kw: Any) -> dict[str, Any]:
    return {"term": 1, "workers": [], "apps": [], "shuffles": [], **kw}


def shuffle(committed: bool = False, lost: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "app_id": "a",
        "shuffle_id": 0,
        "num_mappers": 2,
        "num_partitions": 4,
        "committed": committed,
        "total_bytes": 10,
        "lost_partitions": list(lost),
    }


def texts(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [e["text"] for e in diff_events(old, new, 1.0)]


def test_what_changed_between_two_statuses() -> None:
    w = {"worker_id": "w1", "status": "active"}
    assert texts(status(), status(workers=[w])) == ["worker w1 registered"]
    assert texts(status(workers=[w]), status(workers=[{**w, "status": "lost"}])) == [
        "worker w1 active -> lost"
    ]
    assert texts(status(), status(apps=[{"app_id": "a"}])) == ["app a registered"]
    assert texts(status(apps=[{"app_id": "a"}]), status()) == ["app a gone"]
    assert texts(status(), status(shuffles=[shuffle()])) == ["shuffle a/0 registered (2 maps, 4 partitions)"]
    assert texts(status(shuffles=[shuffle()]), status(shuffles=[shuffle(True)])) == [
        "shuffle a/0 committed (10 bytes)"
    ]
    assert texts(status(shuffles=[shuffle(True)]), status(shuffles=[shuffle(True, (3,))])) == [
        "shuffle a/0 lost partitions [3]"
    ]
    assert texts(status(), status(term=2)) == ["term 1 -> 2"]
    assert texts(status(), status()) == []


def test_history_throughput_and_the_first_status() -> None:
    h = History(keep=3)
    h.add(Sample(10.0, 0.0, 0.0), status(apps=[{"app_id": "a"}]))
    h.add(Sample(12.0, 200.0, 50.0), None)  # a sample without STATUS adds no event
    h.add(Sample(14.0, 200.0, 250.0), status(apps=[{"app_id": "a"}]))
    assert [e["text"] for e in h.events] == ["app a registered"]  # the first against nothing
    assert h.throughput() == [
        {"at": 12.0, "push_bps": 100.0, "fetch_bps": 25.0},
        {"at": 14.0, "push_bps": 0.0, "fetch_bps": 100.0},
    ]
    h.add(Sample(16.0, 0.0, 0.0), None)  # a worker restarted: counters fell, no negative rate
    assert h.throughput()[-1] == {"at": 16.0, "push_bps": 0.0, "fetch_bps": 0.0}
    assert len(h.samples) == 3
