"""The offload retries a failed upload or report until the copy is offloaded or gone (issue 26):
an outage of the store or of the master longer than any fixed number of attempts loses nothing.

The store here is the in-memory twin with a switch that makes every request fail as an
unreachable S3 server does (an ``ObjectStoreError``); the real outage, with SeaweedFS stopped
and started again, is in integration/test_object_store.py."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence

import pytest

from croupier.core.errors import RequestTimeout
from croupier.core.retry_backoff import RetryBackoff
from croupier.dataplane.offload import OffloadedCopy, Offloader
from croupier.storage.index import IndexBuilder
from croupier.storage.store import LocationKey, MemoryPartitionStore
from croupier.transports.objstore import MemoryObjectStore, ObjectStoreError
from tests.storage.helpers import append, batch, key

FAST = RetryBackoff(first=0.02, cap=0.1)


class FlakyStore(MemoryObjectStore):
    """The twin, down (every request fails) while ``down`` is set; counts its puts."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.puts = 0

    def _check(self) -> None:
        if self.down:
            raise ObjectStoreError("error sending request: connection refused")

    def put(self, key: str, data: bytes) -> None:
        self._check()
        self.puts += 1
        super().put(key, data)

    def put_parts(self, key: str, parts: Iterable[bytes]) -> int:
        self._check()
        return super().put_parts(key, parts)

    def size(self, key: str) -> int | None:
        self._check()
        return super().size(key)

    def delete(self, keys: Sequence[str]) -> None:
        self._check()
        super().delete(keys)


def _committed(store: MemoryPartitionStore, k: LocationKey) -> None:
    f = store.create(k)
    builder = IndexBuilder(10_000)
    append(f, builder, [batch(0, 0, i, os.urandom(500)) for i in range(3)])
    f.commit(builder.build())


def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


def test_an_outage_longer_than_any_fixed_number_of_attempts_delays_the_offload_never_loses_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    objects, store = FlakyStore(), MemoryPartitionStore()
    keys = [key(partition=p) for p in range(3)]
    for k in keys:
        _committed(store, k)
    reported: list[OffloadedCopy] = []
    objects.down = True
    offloader = Offloader(objects, store, threads=2, on_offloaded=reported.append, backoff=FAST)
    try:
        with caplog.at_level(logging.DEBUG, logger="croupier.dataplane.offload"):
            offloader.submit(keys)
            _until(lambda: offloader.failed >= 5 * len(keys))  # far more than the old 3 attempts
            stats = offloader.stats()
            assert stats["retrying"] == stats["pending"] == 3 and stats["uploaded"] == 0
            assert stats["lag_seconds"] > 0
            objects.down = False
            _until(lambda: len(reported) == 3)
        stats = offloader.stats()
        assert stats["uploaded"] == 3 and stats["pending"] == stats["retrying"] == 0
        assert sorted(c.key for c in reported) == sorted(keys)
        for c in reported:
            assert objects.size(c.index_key) is not None and objects.size(c.data_key) == c.size
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        per_key = {k.name: sum(k.name in r.getMessage() for r in warnings) for k in keys}
        failures = offloader.failed
        # the first failure of each copy, with its error; then ever more rarely (powers of two)
        assert all(1 <= n <= (failures).bit_length() for n in per_key.values()), per_key
        assert all("connection refused" in r.getMessage() for r in warnings)
        assert len(warnings) < failures
    finally:
        offloader.close()


def test_a_failed_report_is_retried_without_uploading_again() -> None:
    objects, store = FlakyStore(), MemoryPartitionStore()
    k = key(partition=1)
    _committed(store, k)
    calls: list[OffloadedCopy] = []

    def report(copy: OffloadedCopy) -> None:
        calls.append(copy)
        if len(calls) <= 3:
            raise RequestTimeout("no master answered")

    offloader = Offloader(objects, store, threads=1, on_offloaded=report, backoff=FAST)
    try:
        offloader.submit([k])
        _until(lambda: len(calls) == 4 and offloader.stats()["pending"] == 0)
        assert objects.puts == 2  # the data and the index, once
        assert offloader.report_failed == 3 and offloader.uploaded == 1
    finally:
        offloader.close()


def test_retries_stop_when_the_shuffle_is_destroyed_or_the_copy_is_gone() -> None:
    objects, store = FlakyStore(), MemoryPartitionStore()
    a, b = key(shuffle=0), key(shuffle=1)
    _committed(store, a)
    _committed(store, b)
    objects.down = True
    offloader = Offloader(objects, store, threads=1, backoff=FAST)
    try:
        offloader.submit([a, b])
        _until(lambda: offloader.stats()["retrying"] == 2)
        offloader.delete(a.app_id, a.shuffle_id)  # DESTROY of shuffle 0 (its delete fails too)
        store.remove(b.app_id, b.shuffle_id)  # shuffle 1's files gone
        objects.down = False
        _until(lambda: offloader.stats()["pending"] == 0)
        assert offloader.uploaded == 0 and objects.puts == 0
    finally:
        offloader.close()


def test_close_stops_the_retries_at_once() -> None:
    objects, store = FlakyStore(), MemoryPartitionStore()
    k = key()
    _committed(store, k)
    objects.down = True
    offloader = Offloader(objects, store, threads=1, backoff=RetryBackoff(30.0, 30.0))
    offloader.submit([k])
    _until(lambda: offloader.stats()["retrying"] == 1)
    started = time.monotonic()
    offloader.close()
    assert time.monotonic() - started < 5


def test_a_copy_found_at_start_already_in_the_store_is_reported_not_uploaded_again() -> None:
    objects, store = FlakyStore(), MemoryPartitionStore()
    done, not_yet = key(partition=0), key(partition=1)
    _committed(store, done)
    _committed(store, not_yet)
    first = Offloader(objects, store, threads=1)
    try:
        uploaded = first.upload(done)  # offloaded, then the worker died before reporting it
    finally:
        first.close()
    puts = objects.puts
    reported: list[OffloadedCopy] = []
    offloader = Offloader(objects, store, threads=1, on_offloaded=reported.append, backoff=FAST)
    try:
        offloader.submit([done, not_yet], found=True)
        _until(lambda: len(reported) == 2)
    finally:
        offloader.close()
    assert objects.puts == puts + 2  # only not_yet's data and index
    assert [c for c in reported if c.key == done] == [uploaded]
