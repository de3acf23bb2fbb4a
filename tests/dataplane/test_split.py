"""``SplitPolicy``: sizes per primary location against the threshold, forgotten with their
shuffle; hard splits from decommissioning and from hooks."""

from __future__ import annotations

import pytest

from croupier.dataplane.split import SplitPolicy


def test_sizes_add_up_per_location_and_are_forgotten_with_their_shuffle() -> None:
    split = SplitPolicy(100)
    assert split.taken("a", 1, {(0, 0): 60, (1, 0): 10}) == []
    assert split.taken("a", 1, {(0, 0): 40, (0, 1): 99}) == [[0, 0]]
    assert split.taken("a", 2, {(0, 0): 50}) == []
    split.forget("a", 1)
    assert split.size("a", 1, 0, 0) == 0 and split.size("a", 2, 0, 0) == 50
    split.forget("a", None)
    assert split.size("a", 2, 0, 0) == 0


def test_hard_splits_name_every_location_when_decommissioning_else_what_the_hooks_name() -> None:
    split = SplitPolicy(100)
    assert split.hard("a", 1, [(0, 0), (1, 2)]) == ([], "")
    split.add_hard(lambda app, shuffle, partition, epoch: epoch == 2)
    assert split.hard("a", 1, [(0, 0), (1, 2), (1, 2)]) == ([[1, 2]], "the location takes no more data")
    split.decommission()
    assert split.hard("a", 1, [(1, 2), (0, 0)]) == ([[0, 0], [1, 2]], "the worker is decommissioning")


def test_the_threshold_is_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SplitPolicy(0)
