"""Hypothesis strategies: random but plausible command sequences for the master."""

from __future__ import annotations

from hypothesis import strategies as st

from croupier.core import commands as c
from croupier.core.bitmap import encode_bitmap, from_partitions

WORKERS = [f"w{i}" for i in range(5)]
APPS = ["a0", "a1", "a2"]
HOSTS = ["h0", "h1", "h2"]

worker_ids = st.sampled_from(WORKERS)
app_ids = st.sampled_from(APPS)
shuffle_ids = st.integers(0, 3)


def mapper_end(
    app_id: st.SearchStrategy[str],
    shuffle_id: st.SearchStrategy[int],
    map_id: st.SearchStrategy[int],
    touched: st.SearchStrategy[int],
) -> st.SearchStrategy[c.MapperEnd]:
    """MapperEnds whose bitmap sets the lowest ``touched`` bits in 1..3 bytes: it fits a shuffle of
    up to 24 partitions when the size is right, and is refused (BAD_REQUEST) when it is not."""

    @st.composite
    def build(draw: st.DrawFn) -> c.MapperEnd:
        t = draw(touched)
        size = draw(st.integers(max(1, (t + 7) // 8), 3))
        bitmap = encode_bitmap(((1 << t) - 1).to_bytes(size, "little"))
        return c.MapperEnd(draw(app_id), draw(shuffle_id), draw(map_id), draw(st.integers(0, 2)), t, bitmap)

    return build()


def mapper_end_batch(
    app_id: st.SearchStrategy[str],
    shuffle_id: st.SearchStrategy[int],
    map_id: st.SearchStrategy[int],
    touched: st.SearchStrategy[int],
) -> st.SearchStrategy[c.MapperEndBatch]:
    """MapperEndBatches of 1..4 entries drawn as ``mapper_end``'s (a map may repeat in one)."""

    @st.composite
    def build(draw: st.DrawFn) -> c.MapperEndBatch:
        app, shuffle = draw(app_id), draw(shuffle_id)
        ends = draw(
            st.lists(mapper_end(st.just(app), st.just(shuffle), map_id, touched), min_size=1, max_size=4)
        )
        return c.MapperEndBatch(
            app, shuffle, tuple((e.map_id, e.attempt_id, e.touched, e.partitions) for e in ends)
        )

    return build()


def register_worker() -> st.SearchStrategy[c.Command]:
    return st.builds(
        c.RegisterWorker,
        worker_id=worker_ids,
        host=st.sampled_from(HOSTS),
        control_port=st.just(1),
        push_port=st.just(2),
        replicate_port=st.just(3),
        fetch_port=st.just(4),
        slots=st.integers(0, 60) | st.just(1000),
        incarnation=st.sampled_from(["i1", "i2"]),
    )


def report_offload(
    apps: st.SearchStrategy[str], shuffles: st.SearchStrategy[int]
) -> st.SearchStrategy[c.Command]:
    """A worker's REPORT_OFFLOAD (issue 26): a few copies, some repeated across reports."""
    copy = st.tuples(
        st.integers(0, 8),
        st.integers(0, 2),
        st.sampled_from(["primary", "replica"]),
        st.integers(0, 10**6),
        st.sampled_from(["0" * 64, "ab" * 32]),
    )
    return st.builds(
        c.ReportOffload,
        worker_id=worker_ids,
        app_id=apps,
        shuffle_id=shuffles,
        copies=st.lists(copy, min_size=1, max_size=3).map(tuple),
    )


commands: st.SearchStrategy[c.Command] = st.one_of(
    register_worker(),
    report_offload(app_ids, shuffle_ids),
    st.builds(c.WorkerHeartbeat, worker_id=worker_ids, incarnation=st.sampled_from(["i1", "i2"])),
    st.builds(c.LoseWorker, worker_id=worker_ids),
    st.builds(c.ExcludeWorker, worker_id=worker_ids, excluded=st.booleans()),
    st.builds(c.DecommissionWorker, worker_id=worker_ids),
    st.builds(c.RegisterApp, name=st.just("job"), app_id=st.one_of(st.none(), app_ids)),
    st.builds(c.AppHeartbeat, app_id=app_ids),
    st.builds(c.UnregisterApp, app_id=app_ids),
    st.builds(c.ExpireApp, app_id=app_ids),
    st.builds(
        c.RegisterShuffle,
        app_id=app_ids,
        num_mappers=st.integers(1, 4),
        num_partitions=st.integers(1, 20),
        replicate=st.booleans(),
        shuffle_id=st.one_of(st.none(), shuffle_ids),
        loads=st.one_of(st.none(), st.dictionaries(worker_ids, st.floats(0, 1))),
        request_id=st.one_of(st.none(), st.sampled_from(["r1", "r2"])),
    ),
    st.builds(
        c.RevivePartition,
        app_id=app_ids,
        shuffle_id=shuffle_ids,
        partition=st.integers(0, 20),
        epoch=st.integers(0, 3),
        failed_workers=st.lists(worker_ids, max_size=2).map(tuple),
    ),
    mapper_end(app_ids, shuffle_ids, st.integers(0, 4), st.integers(0, 20)),
    st.builds(
        c.ReportCommit,
        app_id=app_ids,
        shuffle_id=shuffle_ids,
        failed_copies=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 2), worker_ids), max_size=4).map(
            tuple
        ),
        total_bytes=st.integers(0, 10**9),
    ),
    st.builds(c.GetLocations, app_id=app_ids, shuffle_id=shuffle_ids, partition=st.integers(0, 20)),
    st.builds(
        c.GetLocationsBatch,
        app_id=app_ids,
        shuffle_id=shuffle_ids,
        partitions=st.lists(st.integers(0, 20), min_size=1, max_size=5).map(tuple),
    ),
    st.builds(c.UnregisterShuffle, app_id=app_ids, shuffle_id=shuffle_ids),
    st.builds(c.Status),
    st.builds(c.TakeOver, term=st.integers(0, 5), leader=st.just("tcp://127.0.0.1:9097")),
)

live_apps = st.sampled_from(APPS[:2])

setup: st.SearchStrategy[list[c.Command]] = st.builds(
    lambda workers, apps: [*workers, *apps],
    st.lists(register_worker(), min_size=2, max_size=5),
    st.just(
        [
            c.RegisterApp("job", "a0"),
            c.RegisterApp("job", "a1"),
            c.RegisterShuffle("a0", num_mappers=2, num_partitions=4),
            c.RegisterShuffle("a1", num_mappers=3, num_partitions=7, replicate=False),
        ]
    ),
)
busy: st.SearchStrategy[c.Command] = st.one_of(
    commands,
    report_offload(st.just("a0"), st.just(0)),
    mapper_end(st.just("a0"), st.just(0), st.integers(0, 1), st.integers(0, 4)),
    mapper_end_batch(st.just("a0"), st.just(0), st.integers(0, 1), st.integers(0, 4)),
    st.builds(
        c.ReportCommit,
        app_id=st.just("a0"),
        shuffle_id=st.just(0),
        failed_copies=st.lists(st.tuples(st.integers(0, 3), st.just(0), worker_ids), max_size=3).map(tuple),
        lost_maps=st.lists(st.tuples(st.integers(0, 3), st.just(0), st.integers(1, 2)), max_size=2).map(
            tuple
        ),
    ),
    st.builds(
        c.RegisterShuffle, app_id=live_apps, num_mappers=st.integers(1, 3), num_partitions=st.integers(1, 8)
    ),
    st.builds(
        c.RegisterShuffle, app_id=live_apps, num_mappers=st.integers(1, 3), num_partitions=st.integers(1, 8)
    ),
    mapper_end(live_apps, st.integers(0, 1), st.integers(0, 2), st.integers(0, 8)),
    mapper_end_batch(live_apps, st.integers(0, 1), st.integers(0, 3), st.integers(0, 8)),
    st.builds(
        c.ReportCommit,
        app_id=live_apps,
        shuffle_id=st.integers(0, 1),
        failed_copies=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 1), worker_ids), max_size=3).map(
            tuple
        ),
    ),
    st.builds(
        c.RevivePartition,
        app_id=live_apps,
        shuffle_id=st.integers(0, 1),
        partition=st.integers(0, 7),
        epoch=st.integers(0, 2),
    ),
    # reruns (issue 16): of lost maps (after a ReportCommit with lost_maps, or lost workers) or not
    st.builds(
        c.RerunMaps,
        app_id=live_apps,
        shuffle_id=st.integers(0, 1),
        maps=st.lists(st.integers(0, 2), min_size=1, max_size=3).map(tuple),
    ),
    st.builds(c.GetLostMaps, app_id=live_apps, shuffle_id=st.integers(0, 1)),
)


def _finish(lost: int) -> list[c.Command]:
    """Every map of a0/0 ends, it commits with map ``lost``'s data gone, and that map reruns."""
    declared = encode_bitmap(from_partitions([0, 1], 4))
    return [
        c.MapperEnd("a0", 0, 0, 0, 2, declared),
        c.MapperEnd("a0", 0, 1, 0, 2, declared),
        c.ReportCommit("a0", 0, lost_maps=((1, lost, lost + 1),)),
        c.RerunMaps("a0", 0, (lost,)),
    ]


# a cluster is set up first, then anything may happen (sometimes a commit and a rerun midway)
scenarios: st.SearchStrategy[list[c.Command]] = st.builds(
    lambda head, tail, finish, more: [*head, *tail, *finish, *more],
    setup,
    st.lists(busy, min_size=5, max_size=60),
    st.sampled_from([[], _finish(0), _finish(1), _finish(0)[:3]]),
    st.lists(busy, max_size=20),
)
