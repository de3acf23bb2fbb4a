"""What the master's HTTP API serves, built from its STATUS and its state.

``shuffle_detail`` runs on the master actor's thread (``MasterFront.inspect(fn)``);
``History`` keeps the last minutes of cluster samples (throughput from the workers'
``/api/v1/worker``, and the events seen between two STATUS snapshots) for the status page.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from croupier.core.state import MasterState

__all__ = ["History", "MasterApi", "Sample", "diff_events", "shuffle_detail"]

MAX_DETAIL_PARTITIONS = 10_000  # a bigger shuffle's detail lists the first ones and says so


def shuffle_detail(app_id: str, shuffle_id: int) -> Callable[[MasterState], dict[str, Any] | None]:
    """The function that reads one shuffle's detail from the state (on the actor thread)."""

    def read(state: MasterState) -> dict[str, Any] | None:
        info = state.shuffle(app_id, shuffle_id)
        if info is None:
            return None
        commit = info.commit
        lost = set(commit.lost_partitions) if commit is not None else set()
        lost_copies: dict[int, list[dict[str, Any]]] = {}
        for p, epoch, worker in commit.lost_copies if commit is not None else ():
            lost_copies.setdefault(p, []).append({"epoch": epoch, "worker": worker})
        shown = min(info.num_partitions, MAX_DETAIL_PARTITIONS)
        partitions = [
            {
                "partition": p,
                "epochs": [
                    {"epoch": loc.epoch, "primary": loc.primary, "replica": loc.replica}
                    for loc in info.locations(p)
                ],
                "lost": p in lost,
                "lost_copies": lost_copies.get(p, []),
            }
            for p in range(shown)
        ]
        state_name = "committed" if commit is not None else ("committing" if info.all_ended else "writing")
        return {
            "app_id": app_id,
            "shuffle_id": shuffle_id,
            "state": state_name,
            "num_mappers": info.num_mappers,
            "num_partitions": info.num_partitions,
            "replicate": info.replicate,
            "mappers_ended": len(info.winners),
            "winners": {str(m): w[0] for m, w in sorted(info.winners.items())},
            "total_bytes": commit.total_bytes if commit is not None else None,
            "total_batches": commit.total_batches if commit is not None else None,
            "committed_at": commit.at if commit is not None else None,
            "revived_partitions": len(info.revivals),
            "lost_partitions": sorted(lost),
            "partitions": partitions,
            "partitions_truncated": info.num_partitions > shown,
        }

    return read


@dataclass
class MasterApi:
    """The master's side of the HTTP API.

    status: STATUS as a JSON dict, or None when this master does not serve (a follower).
    inspect: runs a function on the master actor's thread with its state (None: not serving).
    leader_http: the leader's HTTP base URL when this master is a follower (None: unknown).
    """

    status: Callable[[], dict[str, Any] | None]
    inspect: Callable[[Callable[[MasterState], Any]], Any]
    leader_http: Callable[[], str | None] = lambda: None


@dataclass
class Sample:
    at: float
    push_bytes: float  # the cluster's push bytes counter (primary) at ``at``
    fetch_bytes: float
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> its /api/v1/worker


class History:
    """The last ``keep`` samples and ``events`` recent events (oldest first)."""

    def __init__(self, keep: int = 150, events: int = 100) -> None:
        self.samples: collections.deque[Sample] = collections.deque(maxlen=keep)
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=events)
        self.last_status: dict[str, Any] | None = None

    def add(self, sample: Sample, status: dict[str, Any] | None) -> None:
        self.samples.append(sample)
        if status is not None:  # the first one against nothing: what exists is "registered" then
            self.events.extend(diff_events(self.last_status or {}, status, sample.at))
            self.last_status = status

    def throughput(self) -> list[dict[str, float]]:
        """Push and fetch bytes per second between consecutive samples."""
        out = []
        pairs = list(self.samples)
        for a, b in itertools.pairwise(pairs):
            dt = b.at - a.at
            if dt <= 0:
                continue
            out.append(
                {
                    "at": b.at,
                    "push_bps": max(0.0, (b.push_bytes - a.push_bytes) / dt),
                    "fetch_bps": max(0.0, (b.fetch_bytes - a.fetch_bytes) / dt),
                }
            )
        return out


def diff_events(old: dict[str, Any], new: dict[str, Any], at: float | None = None) -> list[dict[str, Any]]:
    """What changed between two STATUS snapshots, as events for the status page."""
    at = time.time() if at is None else at
    out: list[dict[str, Any]] = []

    def add(kind: str, text: str) -> None:
        out.append({"at": at, "kind": kind, "text": text})

    before = {w["worker_id"]: w["status"] for w in old.get("workers", ())}
    for w in new.get("workers", ()):
        was = before.get(w["worker_id"])
        if was is None:
            add("worker", f"worker {w['worker_id']} registered")
        elif was != w["status"]:
            add("worker", f"worker {w['worker_id']} {was} -> {w['status']}")
    apps_before = {a["app_id"] for a in old.get("apps", ())}
    apps_now = {a["app_id"] for a in new.get("apps", ())}
    for app in sorted(apps_now - apps_before):
        add("app", f"app {app} registered")
    for app in sorted(apps_before - apps_now):
        add("app", f"app {app} gone")
    shuffles = {(s["app_id"], s["shuffle_id"]): s for s in old.get("shuffles", ())}
    for s in new.get("shuffles", ()):
        key = (s["app_id"], s["shuffle_id"])
        prev = shuffles.get(key)
        name = f"shuffle {s['app_id']}/{s['shuffle_id']}"
        if prev is None:
            add("shuffle", f"{name} registered ({s['num_mappers']} maps, {s['num_partitions']} partitions)")
        elif s.get("committed") and not prev.get("committed"):
            add("shuffle", f"{name} committed ({s.get('total_bytes', 0)} bytes)")
        if s.get("lost_partitions") and not (prev or {}).get("lost_partitions"):
            add("data_lost", f"{name} lost partitions {s['lost_partitions'][:10]}")
    if old and old.get("term") != new.get("term"):
        add("master", f"term {old.get('term')} -> {new.get('term')}")
    return out
