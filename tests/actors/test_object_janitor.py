"""The master's object-store janitor (croupier.actors.object_janitor) on the in-memory twin:
deletions that need no worker, and the orphan sweep's guards (the log loaded first, live
apps, the grace, the interval)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from croupier.actors.object_janitor import ObjectJanitor
from croupier.transports.objstore import MemoryObjectStore

KEYS = ["gone/0/0-0-primary.data", "gone/1/0-0-primary.data", "live/0/0-0-replica.data", "x/notes"]


@pytest.fixture
def store() -> MemoryObjectStore:
    made = MemoryObjectStore()
    for key in KEYS:
        made.put(key, b"x")
        made.age(key, 7200)
    return made


@pytest.fixture
def janitor(store: MemoryObjectStore) -> Iterator[ObjectJanitor]:
    made = ObjectJanitor(store, grace=3600, interval=60)
    yield made
    made.close()


def _settled(janitor: ObjectJanitor, store: MemoryObjectStore, want: list[str]) -> list[str]:
    for _ in range(100):
        keys = [o.key for o in store.list()]
        if keys == sorted(want):
            break
        time.sleep(0.02)
    return keys


def test_a_destroyed_shuffle_or_app_loses_its_objects(
    janitor: ObjectJanitor, store: MemoryObjectStore
) -> None:
    janitor.delete("gone", 1)
    want = sorted(k for k in KEYS if k != "gone/1/0-0-primary.data")
    assert _settled(janitor, store, want) == want
    janitor.delete("gone", None)
    want = ["live/0/0-0-replica.data", "x/notes"]
    assert _settled(janitor, store, want) == want
    assert janitor.stats()["deleted_objects"] == 2


def test_no_sweep_before_the_log_is_loaded(janitor: ObjectJanitor, store: MemoryObjectStore) -> None:
    janitor.tick(time.time())
    time.sleep(0.1)
    assert janitor.stats()["sweeps"] == 0 and len(store.list()) == len(KEYS)


def test_the_sweep_takes_only_unknown_old_apps_of_croupier_s_layout_once_per_interval(
    janitor: ObjectJanitor, store: MemoryObjectStore
) -> None:
    janitor.reset(["live"])
    now = time.time()
    janitor.tick(now)
    want = ["live/0/0-0-replica.data", "x/notes"]
    assert _settled(janitor, store, want) == want
    assert janitor.stats()["swept_apps"] == 1 and janitor.stats()["swept_objects"] == 2
    store.put("late/0/0-0-primary.data", b"x")
    store.age("late/0/0-0-primary.data", 7200)
    janitor.tick(now + 30)  # within the interval: no sweep
    janitor.registered("again")
    store.put("again/0/0-0-primary.data", b"x")
    store.age("again/0/0-0-primary.data", 7200)
    janitor.tick(now + 61)
    want = ["again/0/0-0-primary.data", "live/0/0-0-replica.data", "x/notes"]
    assert _settled(janitor, store, want) == want
    assert janitor.stats()["sweeps"] == 2


def test_a_young_object_keeps_an_unknown_app(janitor: ObjectJanitor, store: MemoryObjectStore) -> None:
    store.put("gone/2/0-0-primary.data", b"x")  # just written
    janitor.reset([])
    janitor.tick(time.time())
    want = ["gone/0/0-0-primary.data", "gone/1/0-0-primary.data", "gone/2/0-0-primary.data", "x/notes"]
    assert _settled(janitor, store, want) == want
