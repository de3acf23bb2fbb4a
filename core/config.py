"""Typed configuration with defaults, and the unit parsers the CLI uses.

Defaults follow Celeborn where it has one (ANCHORS.md), scaled down where a
Python service on a small machine needs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from croupier.core.wire import MAX_DATA_FRAME_BYTES

if TYPE_CHECKING:  # core.quotas imports this module
    from croupier.core.quotas import TenantTable

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "ClientConfig",
    "MasterConfig",
    "WorkerConfig",
    "heartbeat_every",
    "heartbeat_too_slow",
    "parse_duration",
    "parse_size",
]

DEFAULT_HEARTBEAT_INTERVAL = 10.0  # seconds: the most a worker or an app waits between beats


def heartbeat_every(configured: float | None, timeout: float | None) -> float:
    """Seconds between heartbeats: ``configured`` when set; else the default (10 s), at most a
    third of the master's ``timeout`` (None: a master that did not say; PROTOCOL §4)."""
    if configured is not None:
        return configured
    if timeout is None or timeout <= 0:
        return DEFAULT_HEARTBEAT_INTERVAL
    return min(DEFAULT_HEARTBEAT_INTERVAL, timeout / 3)


def heartbeat_too_slow(configured: float | None, timeout: float | None) -> bool:
    """Whether an explicitly ``configured`` interval cannot meet the master's ``timeout``:
    more than a third of it (one lost or late beat then loses the member or the app)."""
    return configured is not None and configured > 0 and timeout is not None and configured > timeout / 3


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER_UNIT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str | int) -> int:
    """``"64MiB"`` -> 67108864. Plain numbers are bytes.

    Raises:
        ValueError: an unknown unit or a malformed number.
    """
    if isinstance(text, int):
        return text
    m = _NUMBER_UNIT.fullmatch(text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (try 64MiB, 1GiB, 500kB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_duration(text: str | float) -> float:
    """``"30s"`` -> 30.0, ``"500ms"`` -> 0.5. Plain numbers are seconds.

    Raises:
        ValueError: an unknown unit or a malformed number.
    """
    if isinstance(text, int | float):
        return float(text)
    m = _NUMBER_UNIT.fullmatch(text)
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r} (try 30s, 500ms, 2min)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]


@dataclass(frozen=True, slots=True)
class MasterConfig:
    """Master settings.

    Parameters:
        worker_timeout: a worker without heartbeats for this long is declared lost.
        app_timeout: an app without heartbeats for this long expires (its shuffles go).
        sweep_interval: how often liveness is checked.
        takeover_grace: after start-up or a takeover, nobody is declared lost for this long.
        snapshot_every: write a snapshot after at least this many events, and after no
            fewer than the rows the state held at the last one (``MasterState.rows``), up to
            16 times this: a snapshot costs O(state), so it stays within about a row per
            event, and a restart replays at most about the state's size in events.
        max_group_events: at most this many events per group commit.
        max_apps: at most this many live (registered, not yet unregistered or expired)
            apps; one more gets ``QUOTA_EXCEEDED``. Each live app has an actor, which is
            one thread on the master (about 22 KiB of RSS each; ``tools/app_threads.py``).
        tenants: the parsed ``--tenants`` file (``croupier.core.quotas``): REGISTER_APP then
            needs a tenant token. None: every app is tenant ``default``.
        max_shuffles, max_partitions, max_bytes_in_flight, max_bytes_stored: the default
            quotas (None: unlimited): of tenant ``default`` without a tenants file, and of
            every tenant whose file sets neither its own nor a ``[default]`` one. A new
            shuffle past one gets ``QUOTA_EXCEEDED`` (``croupier.core.quotas``).
        max_peer_reply_bytes: bytes of replies one client may leave unread; past it, its
            new requests wait until it reads (PROTOCOL §1, "Per-peer reply budget").
        object_store: ``s3://BUCKET/PREFIX``, the workers' (issue 26): the master deletes an
            unregistered or expired app's objects itself (no worker may be left) and sweeps
            the objects of apps it does not know (``croupier.actors.object_janitor``).
        orphan_grace: the sweep leaves an unknown app whose newest object is younger than this.
        orphan_interval: seconds between orphan sweeps (0: none).
    """

    worker_timeout: float = 120.0
    app_timeout: float = 300.0
    sweep_interval: float = 1.0
    takeover_grace: float = 30.0
    snapshot_every: int = 10_000
    max_group_events: int = 4096
    max_apps: int = 10_000
    tenants: TenantTable | None = None
    max_shuffles: int | None = None
    max_partitions: int | None = None
    max_bytes_in_flight: int | None = None
    max_bytes_stored: int | None = None
    max_peer_reply_bytes: int = 64 * 1024**2
    object_store: str | None = None
    orphan_grace: float = 3600.0
    orphan_interval: float = 600.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Worker settings.

    Parameters:
        heartbeat_interval: how often the worker heartbeats the master. None (the default):
            every ``DEFAULT_HEARTBEAT_INTERVAL`` (10 s) at most, and at most a third of the
            ``worker_timeout`` the master tells it (``heartbeat_every``). Set, it is used as
            is, with a warning at registration if it exceeds a third of that timeout.
        slots: how many partition locations it offers.
        memory_cap: buffered (not yet flushed) bytes plus the state of its locations, seals
            and reservations (``storage/limiter.py``) it may hold; pushes get CONGESTED
            above 85 % of it, replication above 95 %, new locations past 50 % in state.
        flush_threshold: a location hands its buffer to the flusher at this size, or at
            256 KiB (if smaller) once buffered data passes an eighth of ``memory_cap``.
        chunk_size: the target size of fetch chunks.
        replicate_timeout: how long a primary waits for its replica.
        max_message_bytes: the largest frame the push and replicate ports accept (default
            ``MAX_DATA_FRAME_BYTES``, the largest batch); the control and fetch ports take
            ``MAX_CONTROL_FRAME_BYTES`` (1 MiB). A larger frame drops the connection.
        commit_fsync: fsync every data file, index and directory at commit. Off by
            default: a batch is acked once it is in memory on two workers, a worker
            process that dies leaves its writes in the page cache, and every batch
            carries a blake3 digest that readers check, so a file torn by an OS crash
            is read from the other copy or reported as lost, never returned wrong.
            It costs about 1.3 s per 2 GiB of copies at commit on the development
            machine (BENCHMARKS.md).
        partition_actors: how many ``PartitionActor`` threads own the worker's locations,
            each a shard of them; 0 gives every location an actor of its own.
        max_peer_reply_bytes: bytes of replies (fetch chunks above all) one client may leave
            unread, on each port; past it, its new requests wait until it reads
            (PROTOCOL §1, "Per-peer reply budget").
        throttle_window: seconds over which each app's push rate (bytes accepted on PUSH
            per second) is measured; 0 turns abnormal-app throttling off.
        throttle_floor: bytes per second an app must exceed to be throttled.
        throttle_z: the z-score against the other apps' rates (leave-one-out) an app must
            exceed to be throttled (``core/throttle.py``). A throttled app's pushes get
            ``CONGESTED`` until its rate falls; other apps proceed.
        split_threshold: the bytes (batch headers included) a primary location takes before
            its PUSH replies ask the writer to split it soft (move to a new epoch in the
            background, PROTOCOL §5.2).
        memory_tier_max: at commit, a location copy of at most this many bytes is also kept
            in memory and served from there (``storage/memory_tier.py``); its file is still
            written. 0 turns the tier off.
        memory_tier_fraction: the most the memory tier holds, as a fraction of
            ``memory_cap``; its bytes count against the cap as held state. 0 turns it off.
        disk_reserve: free bytes each data directory keeps: below it a directory gets no
            new locations, and a worker with no directory above it gets no new slots
            (``--disk-reserve``). None: the smaller of 5 GiB and 10 % of the directory's
            filesystem.
        object_store: ``s3://BUCKET/PREFIX`` (issue 26): every committed copy is also
            uploaded there after COMMIT_FILES (``dataplane/offload.py``), and its objects are
            deleted with the shuffle. None: no object store.
        direct_io: write and read the partition files with ``O_DIRECT`` from per-thread
            buffers, bypassing the page cache (``storage/_direct.py``, issue 25), where the
            data dirs' filesystems take it.
    """

    heartbeat_interval: float | None = None
    slots: int = 100_000
    memory_cap: int = 1024**3
    flush_threshold: int = 1024 * 1024
    chunk_size: int = 8 * 1024**2
    replicate_timeout: float = 10.0
    max_message_bytes: int = MAX_DATA_FRAME_BYTES
    commit_fsync: bool = False
    partition_actors: int = 4
    max_peer_reply_bytes: int = 64 * 1024**2
    throttle_window: float = 300.0
    throttle_floor: int = 200 * 1000**2
    throttle_z: float = 3.0
    split_threshold: int = 1024**3
    memory_tier_max: int = 1024**2
    memory_tier_fraction: float = 0.1
    disk_reserve: int | None = None
    object_store: str | None = None
    direct_io: bool = True


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """SDK settings.

    Parameters:
        rpc_timeout: per-request reply timeout (master calls, pushes), seconds.
        fetch_timeout: reply timeout of OPEN_STREAM and FETCH_CHUNK; a copy that does not
            answer in time is read from the other copy.
        failover_deadline: master calls keep retrying (timeouts, UNAVAILABLE, NOT_LEADER)
            this long, so that a shuffle goes on across a leader election.
        rpc_retries: master calls are tried this many more times after the first (over the
            master's endpoints), however short ``failover_deadline`` is.
        app_heartbeat_interval: seconds between ``AppHeartbeat`` calls; 0 sends none. None
            (the default): 10 s at most, and at most a third of the ``app_timeout`` the
            master tells the client (``heartbeat_every``). Set, it is used as is, with a
            warning at registration if it exceeds a third of that timeout.
        push_buffer_size: a partition's buffer becomes a batch at this size.
        max_in_flight_per_worker: push messages in flight per worker (Celeborn's default).
        push_merge_size: small batches bound for the same worker pair are merged up to this size.
        writer_memory_limit: a writer's partial buffers together; above it the largest are pushed early.
        max_revives_per_partition: revives a writer asks for one partition before it gives up.
        fetch_chunks_in_flight: chunks a reader fetches ahead.
        fetch_exclude_seconds: a worker that did not answer a fetch in time is read last
            (the other copy first), with a 2 s timeout, for this long: one dead worker
            costs a reader one timeout, not one per location (Celeborn excludes such
            workers from fetches the same way).
        commit_wait_timeout: how long a reader waits for the shuffle to commit, seconds.
        curve_server_key: the cluster's CURVE public key (Z85, 40 characters; ``croupier
            secret-public FILE``) for a cluster run with ``--curve``: every socket of the
            client then talks CURVE. Empty: ``$CROUPIER_CURVE_SERVER_KEY`` if set, else plaintext.
    """

    rpc_timeout: float = 30.0
    fetch_timeout: float = 10.0
    failover_deadline: float = 60.0
    rpc_retries: int = 3
    app_heartbeat_interval: float | None = None
    push_buffer_size: int = 64 * 1024
    max_in_flight_per_worker: int = 32
    push_merge_size: int = 2 * 1024**2
    writer_memory_limit: int = 64 * 1024**2
    max_revives_per_partition: int = 5
    fetch_chunks_in_flight: int = 3
    fetch_exclude_seconds: float = 60.0
    commit_wait_timeout: float = 300.0
    curve_server_key: str = ""
