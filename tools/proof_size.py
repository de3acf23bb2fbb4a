"""What declared partitions cost the master: log bytes, memory, snapshot size and reply time.

``python -m croupier.tools.proof_size`` folds one shuffle's ``MapperEnded`` events (every
map ending once) into a fresh ``MasterState`` and prints, per shape:

- ``log_bytes``: the encoded events, as the event log stores them (and ``log_bytes_v1``,
  the same events without ``partitions``, for comparison);
- ``state_bytes``: memory the fold allocated for them (``tracemalloc``), and
  ``state_bytes_v1`` for the same events without ``partitions``;
- ``snapshot_bytes``: the compressed snapshot of the whole state;
- ``maps_seconds``: answering ``maps`` for every partition once (then cached), and
  ``maps_json_bytes``: those answers as JSON.

Shapes: every map touches every partition (dense), or a few seeded-random ones (sparse).
Pure computation in the caller's thread; nothing is started or written.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
import tracemalloc
from typing import Any

from croupier.core.bitmap import encode_bitmap, from_partitions
from croupier.core.events import (
    AppRegistered,
    MapperEnded,
    ShuffleRegistered,
    WorkerRegistered,
    encode_event,
)
from croupier.core.state import MasterState, apply

__all__ = ["SHAPES", "main", "measure"]

# (maps, partitions, partitions each map touches: None = all)
SHAPES: list[tuple[int, int, int | None]] = [
    (10_000, 1_000, None),
    (10_000, 1_000, 10),
    (100_000, 100, None),
    (100_000, 100, 5),
]


def _registered(num_mappers: int, num_partitions: int) -> MasterState:
    state = MasterState()
    workers = [f"w{i}" for i in range(4)]
    for w in workers:
        apply(state, WorkerRegistered(w, "h", 1, 2, 3, 4, 10**7, "inc", 0.0))
    apply(state, AppRegistered("app", "job", 0.0))
    pairs = tuple((w, workers[(i + 1) % 4]) for i, w in enumerate(workers))
    incarnations = tuple((w, "inc") for w in workers)
    apply(state, ShuffleRegistered("app", 0, num_mappers, num_partitions, True, pairs, 0.0, incarnations))
    return state


def _events(num_mappers: int, num_partitions: int, touched: int | None) -> list[MapperEnded]:
    rng = random.Random(12)
    everything = encode_bitmap(from_partitions(range(num_partitions), num_partitions))
    out = []
    for m in range(num_mappers):
        if touched is None:
            out.append(MapperEnded("app", 0, m, 0, num_partitions, everything))
        else:
            chosen = rng.sample(range(num_partitions), touched)
            out.append(
                MapperEnded("app", 0, m, 0, touched, encode_bitmap(from_partitions(chosen, num_partitions)))
            )
    return out


def _folded_bytes(state: MasterState, events: list[MapperEnded]) -> int:
    """Bytes the fold of ``events`` into ``state`` keeps allocated."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for e in events:
        apply(state, e)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return kept


def measure(num_mappers: int, num_partitions: int, touched: int | None) -> dict[str, Any]:
    """Fold one shuffle's map ends and report the sizes (see the module docstring)."""
    state = _registered(num_mappers, num_partitions)
    events = _events(num_mappers, num_partitions, touched)
    v1 = [MapperEnded("app", 0, e.map_id, 0, e.touched) for e in events]
    log_bytes = sum(len(encode_event(e)) for e in events)
    log_v1 = sum(len(encode_event(e)) for e in v1)
    state_v1 = _folded_bytes(_registered(num_mappers, num_partitions), v1)
    del v1
    state_bytes = _folded_bytes(state, events)
    del events
    info = state.shuffles[("app", 0)]
    start = time.perf_counter()
    answers = [info.declared_maps(p) for p in range(num_partitions)]
    maps_seconds = time.perf_counter() - start
    return {
        "maps": num_mappers,
        "partitions": num_partitions,
        "touched": touched or num_partitions,
        "log_bytes": log_bytes,
        "log_bytes_v1": log_v1,
        "state_bytes": state_bytes,
        "state_bytes_v1": state_v1,
        "snapshot_bytes": len(state.snapshot_bytes()),
        "maps_seconds": round(maps_seconds, 3),
        "maps_json_bytes": len(json.dumps(answers, separators=(",", ":"))),
    }


def main() -> int:
    for shape in SHAPES:
        print(json.dumps(measure(*shape)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
