"""``Locations.reopen``: after a commit, only the locations a rerun placed take data again."""

from __future__ import annotations

from typing import Any, cast

import pytest

from croupier.core.errors import StaleLocation
from croupier.dataplane.locations import Locations
from croupier.storage.limiter import MemoryLimiter
from croupier.storage.store import LocationKey


def test_a_committed_shuffle_admits_only_the_reopened_locations() -> None:
    locations = Locations(MemoryLimiter(1 << 30))
    owner = cast(Any, object())
    locations.open(0, lambda: owner)
    old = LocationKey("a", 0, 2, 0, "primary")
    locations.admit(old)
    locations.reopen("a", 0, [(3, 1)])  # a revive before the commit: nothing to reopen
    locations.of_shuffle("a", 0, seal=True)  # COMMIT_FILES: the shuffle is sealed here
    rerun = LocationKey("a", 0, 2, 1, "primary")
    with pytest.raises(StaleLocation):
        locations.admit(rerun)
    locations.reopen("a", 0, [(2, 1)])  # the RESERVE of the rerun's new epoch
    assert locations.admit(rerun) is owner
    with pytest.raises(StaleLocation):
        locations.admit(LocationKey("a", 0, 3, 1, "primary"))  # not placed by the rerun
    with pytest.raises(StaleLocation):
        locations.admit(old)  # the committed location takes no more data
