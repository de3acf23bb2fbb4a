"""The commit verdict: copies that lost memory or miss a sibling's seal fail; missing seals are named."""

from __future__ import annotations

from croupier.core.bitmap import from_partitions
from croupier.core.commit_verdict import Copy, judge
from croupier.core.dataplane import CommitFilesReply, LocationReport
from croupier.core.enums import CopyRole

P, R = CopyRole.PRIMARY, CopyRole.REPLICA
N = 2  # partitions


def copies(epochs: int = 1) -> list[Copy]:
    """Partition p's epoch e on (a, b), placed on incarnation i1 of each."""
    return [
        Copy(p, e, w, role, "i1") for p in range(N) for e in range(epochs) for w, role in (("a", P), ("b", R))
    ]


def report(p: int, role: str, *seals: tuple[int, int], e: int = 0) -> LocationReport:
    return LocationReport(
        p, e, role, True, bytes=10, batches=1, chunks=1, seals=tuple((m, a, 1) for m, a in seals)
    )


def reply(incarnation: str, *reports: LocationReport) -> CommitFilesReply:
    return CommitFilesReply(incarnation, reports)


# map 0 (attempt 0) declared both partitions, map 1 (attempt 2) declared partition 1 only
WINNERS = {0: (0, 2, from_partitions([0, 1], N)), 1: (2, 1, from_partitions([1], N))}


def full(worker_role: str, incarnation: str = "i1") -> CommitFilesReply:
    return reply(incarnation, report(0, worker_role, (0, 0)), report(1, worker_role, (0, 0), (1, 2), (1, 0)))


def test_every_seal_in_both_copies_commits_everything() -> None:
    verdict = judge(copies(), {"a": full(P), "b": full(R)}, WINNERS, N)
    assert verdict.failed == () and verdict.lost_maps == ()
    assert (verdict.total_bytes, verdict.total_batches) == (20, 2)  # primaries only


def test_a_restarted_worker_fails_every_copy_placed_before_even_one_it_reports() -> None:
    # the restarted worker took pushes after its restart: it reports partition 1 with map 1 only
    restarted = reply("i2", report(1, P, (1, 2)))
    verdict = judge(copies(), {"a": restarted, "b": full(R)}, WINNERS, N)
    assert verdict.failed == ((0, 0, "a"), (1, 0, "a"))
    assert verdict.lost_maps == ()  # the replica holds every seal


def test_a_copy_missing_a_seal_its_sibling_holds_fails() -> None:
    partial = reply("i1", report(0, R, (0, 0)), report(1, R, (0, 0)))
    verdict = judge(copies(), {"a": full(P), "b": partial}, WINNERS, N)
    assert verdict.failed == ((1, 0, "b"),)
    assert verdict.lost_maps == ()


def test_a_losing_attempts_seal_does_not_count() -> None:
    loser_only = reply("i1", report(0, R, (0, 0)), report(1, R, (0, 0), (1, 2)))  # lacks (1, 0): a loser
    verdict = judge(copies(), {"a": full(P), "b": loser_only}, WINNERS, N)
    assert verdict.failed == ()


def test_an_empty_copy_beside_one_with_data_fails() -> None:
    verdict = judge(copies(), {"a": full(P), "b": reply("i1")}, WINNERS, N)
    assert verdict.failed == ((0, 0, "b"), (1, 0, "b"))


def test_a_declared_seal_in_no_copy_is_a_lost_map() -> None:
    no_map1 = [reply("i1", report(0, role, (0, 0)), report(1, role, (0, 0))) for role in (P, R)]
    verdict = judge(copies(), {"a": no_map1[0], "b": no_map1[1]}, WINNERS, N)
    assert verdict.failed == ()
    assert verdict.lost_maps == ((1, 1, 2),)


def test_both_copies_gone_names_every_declared_map_of_the_partition() -> None:
    verdict = judge(copies(), {"a": None, "b": reply("i2")}, WINNERS, N)
    assert set(verdict.failed) == {(p, 0, w) for p in range(N) for w in "ab"}
    assert verdict.lost_maps == ((0, 0, 1), (1, 0, 2))


def test_a_seal_in_a_later_epoch_covers_the_partition() -> None:
    a = reply("i1", report(0, P, (0, 0)), report(1, P, (0, 0)), report(1, P, (1, 2), e=1))
    b = reply("i1", report(0, R, (0, 0)), report(1, R, (0, 0)), report(1, R, (1, 2), e=1))
    verdict = judge(copies(epochs=2), {"a": a, "b": b}, WINNERS, N)
    # epoch 1 of partition 0 holds nothing in either copy: no failure, and nothing is missing
    assert verdict.failed == () and verdict.lost_maps == ()


def test_undeclared_winners_are_not_checked() -> None:
    old = {m: (a, t, None) for m, (a, t, _) in WINNERS.items()}
    verdict = judge(copies(), {"a": reply("i1"), "b": reply("i1")}, old, N)
    assert verdict.failed == () and verdict.lost_maps == ()


def test_a_failed_report_fails_the_copy() -> None:
    bad = reply("i1", LocationReport.failed(0, 0, P, "disk full"), report(1, P, (0, 0), (1, 2)))
    verdict = judge(copies(), {"a": bad, "b": full(R)}, WINNERS, N)
    assert verdict.failed == ((0, 0, "a"),)


def test_unreported_copies_of_declared_partitions_are_empty_and_nothing_else_is() -> None:
    """A copy its worker did not report holds nothing (an epoch placed after the last push):
    listed as empty when its partition was declared; a failed copy or one of a partition no
    winner declared is not."""
    cs = copies(epochs=2)  # epoch 1 of both partitions: nothing pushed there
    only0 = {0: (0, 1, from_partitions([0], N))}  # the one winner declared partition 0 only
    a = reply("i1", report(0, P, (0, 0)))
    verdict = judge(cs, {"a": a, "b": reply("i1", report(0, R, (0, 0)))}, only0, N)
    assert verdict.failed == () and verdict.lost_maps == ()
    assert verdict.empty == ((0, 1, "a"), (0, 1, "b"))  # partition 1: declared by none, not listed
    # b restarted: its copies failed, and are not empty
    verdict = judge(cs, {"a": a, "b": reply("i2")}, only0, N)
    assert verdict.empty == ((0, 1, "a"),)
    assert verdict.failed == ((0, 0, "b"), (0, 1, "b"), (1, 0, "b"), (1, 1, "b"))
