"""``PushedBytes``: what a worker reports as bytes in flight in its heartbeats (tenants' quotas)."""

from __future__ import annotations

from croupier.dataplane.pushed import PushedBytes


def test_counts_per_shuffle_and_forgets_at_commit_or_destroy() -> None:
    pushed = PushedBytes()
    pushed.add("a", 0, 100)
    pushed.add("a", 0, 50)
    pushed.add("a", 1, 7)
    pushed.add("b", 0, 9)
    assert pushed.report() == (("a", 0, 150), ("a", 1, 7), ("b", 0, 9))
    pushed.drop("a", 0)  # COMMIT_FILES or DESTROY of one shuffle
    assert pushed.report() == (("a", 1, 7), ("b", 0, 9))
    pushed.drop("b", None)  # DESTROY of a whole app
    assert pushed.report() == (("a", 1, 7),)


def test_a_report_keeps_the_largest() -> None:
    pushed = PushedBytes()
    for sid in range(10):
        pushed.add("a", sid, sid)
    assert pushed.report(limit=3) == (("a", 7, 7), ("a", 8, 8), ("a", 9, 9))
