"""``FETCH_SMALL`` for ``readers()``: many small partitions of one worker in one request.

``readers()`` hands a group of readers to ``send_small``: the first copy each would read
(``Reader.first_copy``) is asked for in one ``FETCH_SMALL`` per worker, up to
``MAX_FETCH_SMALL_LOCATIONS`` locations each (PROTOCOL §5.2). Each reader then takes its
entry (``SmallFetch.result``): the whole copy as one chunk, which it parses, checks and
proves exactly as the chunks of OPEN_STREAM and FETCH_CHUNK; or that the worker does not
hold it (read the other copy, as for OPEN_STREAM); or nothing (skipped because too large,
a worker that does not know the message, any other error): then the reader reads that
copy the usual way. A bad digest in the payload fails that copy only, so the reader goes
on to the other copy from its start (PROTOCOL §5.3).

State: per request, its reply (parsed once, by the consuming thread) shared by the
readers of that worker in the group.
"""

from __future__ import annotations

import queue
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from croupier.core.codec import from_json, to_json
from croupier.core.dataplane import MAX_FETCH_SMALL_LOCATIONS, FetchSmall, FetchSmallReply
from croupier.core.errors import BadRequest, CroupierError, RequestTimeout
from croupier.core.wire import MsgType
from croupier.transports.rpc import Reply

if TYPE_CHECKING:
    from croupier._client import Shuffle
    from croupier._reader import Reader

__all__ = ["SmallEntry", "SmallFetch", "send_small"]


@dataclass(frozen=True, slots=True)
class SmallEntry:
    """One location's outcome: ``ok`` with ``data`` (the whole copy), ``absent`` (the worker
    does not hold it or has not committed it), or ``failed`` (no reply in time)."""

    status: str
    data: memoryview | None = None
    message: str = ""


class SmallFetch:
    """One FETCH_SMALL in flight and, once asked, its entries."""

    def __init__(self, url: str, count: int, wait: float) -> None:
        self.url = url
        self._count = count
        self._wait = wait
        self._box: queue.SimpleQueue[tuple[Reply | None, CroupierError | None]] = queue.SimpleQueue()
        self._entries: list[SmallEntry | None] | None = None

    def callback(self, reply: Reply | None, error: CroupierError | None) -> None:
        self._box.put((reply, error))

    def ready(self) -> bool:
        """Whether the reply (or the error) is in: ``result`` would not wait."""
        return self._entries is not None or not self._box.empty()

    def result(self, index: int) -> SmallEntry | None:
        """Location ``index``'s entry, or None: read it the usual way."""
        if self._entries is None:
            self._entries = self._parse()
        return self._entries[index]

    def _parse(self) -> list[SmallEntry | None]:
        nothing: list[SmallEntry | None] = [None] * self._count
        try:
            reply, error = self._box.get(timeout=self._wait)
        except queue.Empty:
            error, reply = RequestTimeout(f"no reply to FETCH_SMALL from {self.url}"), None
        if isinstance(error, RequestTimeout):
            return [SmallEntry("failed", message=f"{error.code}: {error.message}")] * self._count
        if error is not None or reply is None:
            return nothing  # e.g. BAD_REQUEST from a worker without FETCH_SMALL
        try:
            entries = from_json(FetchSmallReply, reply.body).locations
        except BadRequest:
            return nothing
        if len(entries) != self._count:
            return nothing
        payloads = iter(reply.payloads)
        found: list[SmallEntry | None] = []
        for entry in entries:
            if entry.status == "ok":
                data = next(payloads, None)
                if data is None or len(data) != entry.bytes:
                    return nothing  # malformed: every location the usual way
                found.append(SmallEntry("ok", data))
            elif entry.status in ("UNKNOWN_SHUFFLE", "NOT_COMMITTED"):
                found.append(SmallEntry("absent", message=f"{entry.status}: {entry.message or ''}"))
            else:
                found.append(None)
        return found


def send_small(shuffle: Shuffle, group: Sequence[Reader]) -> None:
    """Ask the first copies of ``group`` in one FETCH_SMALL per worker; the readers that have
    none to ask (empty, a doubtful worker) start the usual way."""
    client = shuffle.client
    by_worker: dict[tuple[str, str], list[tuple[Reader, tuple[int, int, str]]]] = defaultdict(list)
    for reader in group:
        first = reader.first_copy()
        if first is None:
            reader.start()
            continue
        url, incarnation, location = first
        by_worker[(url, incarnation)].append((reader, location))
    wait = client.config.rpc_timeout * 2 + 10
    for (url, incarnation), wanted in by_worker.items():
        for at in range(0, len(wanted), MAX_FETCH_SMALL_LOCATIONS):
            part = wanted[at : at + MAX_FETCH_SMALL_LOCATIONS]
            fetch = SmallFetch(url, len(part), wait)
            body = FetchSmall(shuffle.app_id, shuffle.shuffle_id, incarnation, tuple(loc for _, loc in part))
            client._send(
                url,
                int(MsgType.FETCH_SMALL),
                to_json(body),
                [],
                fetch.callback,
                timeout=client.config.fetch_timeout,
            )
            for i, (reader, _) in enumerate(part):
                reader.take_small(fetch, i)
