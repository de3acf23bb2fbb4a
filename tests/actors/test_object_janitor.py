"""The master's object-store janitor (croupier.actors.object_janitor) on the in-memory twin:
deletions that need no worker, and the orphan sweep's guards (the log loaded first, live
apps, the grace, the interval)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from croupier.actors.object_janitor import ObjectJanitor
from croupier.core.sweep import CLAIMS, claim_key
from croupier.transports.objstore import MemoryObjectStore, _Bucket

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
    """The keys once they are ``want`` (or after 2 s), sweep claims left out."""
    for _ in range(100):
        keys = [o.key for o in store.list() if not o.key.startswith(CLAIMS)]
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


# -- two clusters on one prefix (their sweep claims) ------------------------------------------


def _wait_sweeps(janitor: ObjectJanitor, n: int) -> dict[str, int]:
    for _ in range(200):
        stats = janitor.stats()
        if stats["sweeps"] + stats["sweeps_skipped"] >= n:
            return stats
        time.sleep(0.01)
    raise AssertionError(f"no sweep ended: {janitor.stats()}")


def _claims(store: MemoryObjectStore) -> list[str]:
    return sorted(o.key for o in store.list(CLAIMS))


def test_two_clusters_on_one_prefix_never_sweep_each_other_s_apps() -> None:
    """Each cluster's apps are unknown to the other: without the claims, each sweep deleted the
    other's (the docs' "never do that", stop 30's noticed item). Each claims the prefix once its
    log is loaded, before it writes anything there; then neither sweeps, and each says why."""
    bucket = _Bucket()
    a_store = MemoryObjectStore("memory://shared/p", bucket, "p")
    b_store = MemoryObjectStore("memory://shared/p", bucket, "p")
    a = ObjectJanitor(a_store, grace=3600, interval=60, cluster="aa")
    b = ObjectJanitor(b_store, grace=3600, interval=60, cluster="bb")
    try:
        now = time.time()
        for janitor, app in ((a, "a-app"), (b, "b-app")):
            janitor.reset([app])
            janitor.tick(now)
        for janitor in (a, b):
            _wait_sweeps(janitor, 1)
        assert _claims(a_store) == ["_sweepers/aa", "_sweepers/bb"]
        apps = ["a-app/0/0-0-primary.data", "b-app/0/0-0-primary.data"]
        for key in apps:  # each cluster's own shuffles, written since, now old
            a_store.put(key, b"x")
            a_store.age(key, 7200)
        for janitor in (a, b):
            janitor.tick(now + 61)
        for janitor in (a, b):
            assert _wait_sweeps(janitor, 2)["sweeps_skipped"] >= 1
        assert _settled(a, a_store, apps) == apps
        assert a.stats()["swept_apps"] == b.stats()["swept_apps"] == 0
    finally:
        a.close()
        b.close()


def test_a_cluster_claims_the_prefix_before_its_objects_age() -> None:
    """A's claim is written at its first tick after its log loads, long before any of its
    objects is old enough to sweep: B, sweeping later, leaves A's apps alone."""
    bucket = _Bucket()
    a_store = MemoryObjectStore("memory://shared/p", bucket, "p")
    b_store = MemoryObjectStore("memory://shared/p", bucket, "p")
    a = ObjectJanitor(a_store, grace=3600, interval=0, cluster="aa")  # A never sweeps
    b = ObjectJanitor(b_store, grace=3600, interval=60, cluster="bb")
    try:
        a.reset(["a-app"])
        a.tick(time.time())
        for _ in range(100):
            if _claims(a_store):
                break
            time.sleep(0.01)
        a_store.put("a-app/0/0-0-primary.data", b"x")
        a_store.age("a-app/0/0-0-primary.data", 7200)
        b.reset([])
        b.tick(time.time())
        assert _wait_sweeps(b, 1)["sweeps_skipped"] == 1
        assert [o.key for o in a_store.list() if not o.key.startswith(CLAIMS)] == ["a-app/0/0-0-primary.data"]
    finally:
        a.close()
        b.close()


def test_the_same_cluster_s_claim_does_not_stop_a_sweep() -> None:
    """A new leader (or a restarted master) of the same cluster has the same id."""
    store = MemoryObjectStore()
    store.put("orphan/0/0-0-primary.data", b"x")
    store.age("orphan/0/0-0-primary.data", 7200)
    store.put(claim_key("aa"), b"{}")  # this cluster's previous leader
    janitor = ObjectJanitor(store, grace=3600, interval=60, cluster="aa")
    try:
        janitor.reset([])
        janitor.tick(time.time())
        assert _settled(janitor, store, []) == []
        assert _wait_sweeps(janitor, 1) == {
            **janitor.stats(),
            "sweeps": 1,
            "sweeps_skipped": 0,
            "swept_apps": 1,
        }
    finally:
        janitor.close()


def test_a_bad_cluster_id_is_refused() -> None:
    with pytest.raises(ValueError, match="hex"):
        ObjectJanitor(MemoryObjectStore(), grace=1, interval=1, cluster="Not/hex")
