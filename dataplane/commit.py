"""``commit_files``: a worker's answer to COMMIT_FILES (DESIGN §7 step 7).

The shuffle is sealed here first (no location of it is admitted any more), then every
live location of it is told to ``Commit``: each actor flushes, closes and indexes its
copies and calls back once per location. When the last one has reported, the reply
also lists the shuffle's committed files that no live actor holds (found on disk at
start-up, or committed earlier), so a restarted worker reports what it can still serve.
Before the reply, the copies small enough for the memory tier are read back into it
(``storage/memory_tier.py``): reads of the shuffle may start as soon as the reply is in.

State: one ``_Gather`` per request, filled by the actors' threads; the reply is sent
from the thread of the last report (the control server thread when there is none).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

from croupier.actors.partition_actor import Commit, committed_report
from croupier.core.dataplane import CommitFiles, CommitFilesReply, LocationReport, encode_reply
from croupier.core.errors import CroupierError
from croupier.dataplane.locations import Locations
from croupier.storage.memory_tier import MemoryTier
from croupier.storage.store import CommittedFile, LocationKey, PartitionStore
from croupier.transports.rpc import Responder

__all__ = ["admit_small", "commit_files"]

log = logging.getLogger(__name__)


class _Gather:
    """Collects ``expected`` reports from any thread and calls ``finish`` once, with all of them."""

    def __init__(self, expected: int, finish: Callable[[list[LocationReport]], None]) -> None:
        self._lock = threading.Lock()
        self._reports: list[LocationReport] = []
        self._expected = expected
        self._finish = finish

    def add(self, report: LocationReport) -> None:
        with self._lock:
            self._reports.append(report)
            last = len(self._reports) == self._expected
        if last:
            self._finish(self._reports)


def commit_files(
    cmd: CommitFiles,
    *,
    locations: Locations,
    store: PartitionStore,
    incarnation: str,
    responder: Responder,
    tier: MemoryTier | None = None,
    on_committed: Callable[[list[LocationKey]], None] | None = None,
) -> None:
    """Commit the shuffle's locations here; ``responder`` gets the ``CommitFilesReply``.

    Parameters:
        cmd: the validated request.
        locations: the live locations (the shuffle is sealed in it).
        store: where committed files are found.
        incarnation: this worker's, sent back so the master can tell a restart.
        responder: answered once every live location has reported.
        tier: where the small committed copies are kept (none: no tier).
        on_committed: told, after the reply, of every copy committed here (the offload).
    """
    owners = locations.of_shuffle(cmd.app_id, cmd.shuffle_id, seal=True)
    live = {key for keys in owners.values() for key in keys}

    def finish(reports: list[LocationReport]) -> None:
        if tier is not None:
            admit_small(tier, store, cmd, reports)
        on_disk = [committed_report(cf.key, cf.index) for cf in _not_live(store, cmd, live)]
        responder.ok(encode_reply(CommitFilesReply(incarnation, (*reports, *on_disk))))
        if on_committed is not None:
            on_committed(
                [
                    LocationKey(cmd.app_id, cmd.shuffle_id, r.partition, r.epoch, r.role)
                    for r in (*reports, *on_disk)
                    if r.ok
                ]
            )

    if not live:
        finish([])
        return
    gather = _Gather(len(live), finish)
    for ref, keys in owners.items():
        ref.tell(Commit(keys, gather.add))


def _not_live(store: PartitionStore, cmd: CommitFiles, live: set[LocationKey]) -> list[CommittedFile]:
    """The shuffle's committed files that no live actor holds."""
    return [cf for cf in store.scan(cmd.app_id, cmd.shuffle_id) if cf.key not in live]


def admit_small(
    tier: MemoryTier, store: PartitionStore, cmd: CommitFiles, reports: Sequence[LocationReport]
) -> int:
    """Read the committed copies of ``reports`` that the tier wants into it; how many it took."""
    taken = 0
    for report in reports:
        size = report.bytes or 0
        if not report.ok or not tier.wants(size):
            continue
        key = LocationKey(cmd.app_id, cmd.shuffle_id, report.partition, report.epoch, report.role)
        try:
            data = store.read(key, 0, size)
        except CroupierError as exc:  # removed meanwhile (DESTROY): nothing to keep
            log.debug("not kept in memory: %s: %s", key.name, exc)
            continue
        if len(data) == size and tier.admit(key, data):
            taken += 1
            with contextlib.suppress(CroupierError):
                if store.committed(key) is None:  # a DESTROY between the read and the admission
                    tier.evict(cmd.app_id, cmd.shuffle_id)
    return taken
