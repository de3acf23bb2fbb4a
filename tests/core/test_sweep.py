"""The orphan sweep's choice (croupier.core.sweep): never a live app, never a fresh object,
never a prefix holding anything but Croupier's layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.core.sweep import CLAIMS, claim_key, copy_app, orphan_apps, rival_claims

APPS = st.sampled_from(["a-1", "b.2", "c_3", "d"])
KEYS = st.one_of(
    st.builds(lambda a, s, n: f"{a}/{s}/{n}-0-primary.data", APPS, st.integers(0, 9), st.integers(0, 9)),
    st.builds(lambda a, x: f"{a}/{x}", APPS, st.sampled_from(["x", "p/0/y", "", "0"])),
)
OBJECTS = st.lists(st.tuples(KEYS, st.floats(0, 1000)), max_size=30)


def test_the_layout() -> None:
    assert copy_app("app-1/0/3-0-primary.data") == "app-1"
    assert copy_app("app-1/12/overflow/whatever") == "app-1"
    for foreign in ("notes.txt", "app-1/x/y", "app-1/0/", "app-1/0", "other/cluster/app/0/1-0-primary.data"):
        assert copy_app(foreign) is None, foreign
    assert copy_app("../0/x") is None


def test_examples() -> None:
    objects = [
        ("old/0/0-0-primary.data", 10.0),
        ("old/0/0-0-primary.index", 11.0),
        ("young/0/0-0-primary.data", 95.0),
        ("live/1/0-0-primary.data", 1.0),
        ("mixed/0/0-0-primary.data", 1.0),
        ("mixed/readme", 1.0),
    ]
    assert orphan_apps(objects, {"live"}, now=100.0, grace=10.0) == ["old"]
    assert orphan_apps(objects, {"live"}, now=100.0, grace=100.0) == []


@given(OBJECTS, st.sets(APPS), st.floats(0, 2000), st.floats(0, 500))
def test_never_a_live_app_a_fresh_object_or_a_foreign_key(
    objects: list[tuple[str, float]], live: set[str], now: float, grace: float
) -> None:
    chosen = orphan_apps(objects, live, now, grace)
    assert chosen == sorted(set(chosen))
    for app in chosen:
        assert app not in live
        mine = [(k, t) for k, t in objects if k.split("/", 1)[0] == app]
        assert mine and all(copy_app(k) == app and t <= now - grace for k, t in mine)


@given(OBJECTS, st.floats(0, 2000))
def test_every_unknown_app_of_croupier_s_layout_and_old_enough_is_chosen(
    objects: list[tuple[str, float]], now: float
) -> None:
    apps = {k.split("/", 1)[0] for k, _ in objects}
    clean = {a for a in apps if all(copy_app(k) == a for k, _ in objects if k.split("/", 1)[0] == a)}
    assert orphan_apps(objects, set(), now + 1000, 0.0) == sorted(clean)


# -- sweep claims -------------------------------------------------------------------------------


def test_claims_are_not_croupier_s_copy_layout() -> None:
    key = claim_key("0123abcd")
    assert key == "_sweepers/0123abcd" and key.startswith(CLAIMS)
    assert copy_app(key) is None
    assert orphan_apps([(key, 0.0)], (), now=1e9, grace=0) == []
    for bad in ("", "ABC", "a/b", "x" * 65, "0" * 65):
        with pytest.raises(ValueError):
            claim_key(bad)


@given(st.lists(st.sampled_from(["aa", "bb", "cc", "README"]), max_size=8), st.sampled_from(["aa", "bb"]))
def test_a_rival_is_any_other_key_under_the_claims(names: list[str], own: str) -> None:
    keys = [f"{CLAIMS}{n}" for n in names]
    assert rival_claims(keys, own) == sorted(k for k in keys if k != claim_key(own))
