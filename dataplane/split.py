"""``SplitPolicy``: when a worker tells writers to move a partition to a new epoch.

- **Soft split**: a primary location that has taken ``threshold`` bytes (batch headers
  included) is over its size. The PUSH that crossed it (and every later one) is stored
  and acknowledged as usual, and its OK reply names the location in ``soft_split``: the
  writer asks the master for a new epoch in the background and keeps pushing meanwhile.
- **Hard split**: a location that must take no more data: every location once the worker
  is decommissioning (``decommission``), or any that a hook added with ``add_hard`` names
  (for example one whose disk crossed its reserve). Its PUSH is refused whole with
  ``HARD_SPLIT`` (nothing stored): the writer revives the partition now and resends.

Only PUSH (the primary) decides; a REPLICATE is never split, so both copies of a batch
are the same.

State (behind one lock; push server threads and the control thread): the bytes taken per
primary location, forgotten with its shuffle (``forget``), the decommissioning flag and
the hooks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

__all__ = ["HardHook", "SplitPolicy"]

HardHook = Callable[[str, int, int, int], bool]
"""``hard(app_id, shuffle_id, partition, epoch) -> bool``: must that location take no more data?"""

# (app_id, shuffle_id, partition, epoch)
_Key = tuple[str, int, int, int]


class SplitPolicy:
    """Parameters:
    threshold: a primary location's bytes past which its pushes are answered with a soft split.
    """

    def __init__(self, threshold: int) -> None:
        if threshold < 1:
            raise ValueError(f"the split threshold must be at least 1 byte, got {threshold}")
        self.threshold = threshold
        self._lock = threading.Lock()
        self._sizes: dict[_Key, int] = {}
        self._hooks: list[HardHook] = []
        self._decommissioning = False

    @property
    def decommissioning(self) -> bool:
        return self._decommissioning

    def decommission(self, on: bool = True) -> None:
        """From now on every location answers ``HARD_SPLIT`` (off again with ``on=False``)."""
        self._decommissioning = on

    def add_hard(self, hook: HardHook) -> None:
        """Also refuse, with ``HARD_SPLIT``, the locations ``hook`` names."""
        with self._lock:
            self._hooks.append(hook)

    def hard(
        self, app_id: str, shuffle_id: int, pairs: Iterable[tuple[int, int]]
    ) -> tuple[list[list[int]], str]:
        """The ``[partition, epoch]`` of ``pairs`` that must take no more data, and why ("" if none)."""
        if self._decommissioning:
            return [list(pe) for pe in sorted(set(pairs))], "the worker is decommissioning"
        with self._lock:
            hooks = list(self._hooks)
        if not hooks:
            return [], ""
        refused = sorted({(p, e) for p, e in pairs if any(h(app_id, shuffle_id, p, e) for h in hooks)})
        return [list(pe) for pe in refused], "the location takes no more data" if refused else ""

    def taken(self, app_id: str, shuffle_id: int, sizes: dict[tuple[int, int], int]) -> list[list[int]]:
        """Count ``sizes`` (bytes per ``(partition, epoch)``) as stored; returns the
        ``[partition, epoch]`` now at or past the threshold, sorted."""
        over: list[list[int]] = []
        with self._lock:
            for (partition, epoch), size in sorted(sizes.items()):
                key = (app_id, shuffle_id, partition, epoch)
                total = self._sizes.get(key, 0) + size
                self._sizes[key] = total
                if total >= self.threshold:
                    over.append([partition, epoch])
        return over

    def size(self, app_id: str, shuffle_id: int, partition: int, epoch: int) -> int:
        """The bytes a primary location took here."""
        with self._lock:
            return self._sizes.get((app_id, shuffle_id, partition, epoch), 0)

    def forget(self, app_id: str, shuffle_id: int | None) -> None:
        """Forget the sizes of a shuffle (or of every shuffle of an app)."""
        with self._lock:
            for key in [k for k in self._sizes if k[0] == app_id and shuffle_id in (None, k[1])]:
                del self._sizes[key]
