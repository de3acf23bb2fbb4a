"""The object-store port's one conformance suite (DESIGN §3): the in-memory twin and the real
SeaweedFS-backed S3 store pass the same tests."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from croupier.transports.objstore import (
    MULTIPART_PART,
    WRITER_PART,
    MemoryObjectStore,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    open_object_store,
    parse_url,
)


@pytest.fixture(params=["memory", "seaweedfs"])
def store(request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    if request.param == "memory":
        made: ObjectStore = MemoryObjectStore()
    else:
        server = request.getfixturevalue("seaweed")
        made = open_object_store(server.new_bucket_url())
    try:
        yield made
    finally:
        made.close()


def test_put_then_ranged_reads_return_exactly_the_bytes(store: ObjectStore) -> None:
    data = os.urandom(100_000)
    store.put("a/b/one", data)
    assert store.size("a/b/one") == len(data)
    assert store.get_range("a/b/one", 0, len(data)) == data
    assert store.get_range("a/b/one", 12_345, 999) == data[12_345 : 12_345 + 999]


def test_a_range_past_the_end_is_an_error_never_a_short_read(store: ObjectStore) -> None:
    store.put("short", b"0123456789")
    with pytest.raises(ObjectStoreError, match="holds only 5"):
        store.get_range("short", 5, 10)
    with pytest.raises(ObjectStoreError):
        store.get_range("short", 20, 1)


def test_a_missing_object(store: ObjectStore) -> None:
    assert store.size("nope") is None
    with pytest.raises(ObjectNotFound):
        store.get_range("nope", 0, 1)


def test_a_big_object_goes_up_whole_in_parts(store: ObjectStore) -> None:
    data = os.urandom(MULTIPART_PART * 2 + 12_345)  # three parts of a multipart upload
    pieces = [data[i : i + 1_000_000] for i in range(0, len(data), 1_000_000)]
    assert store.put_parts("big/file", iter(pieces)) == len(data)
    assert store.size("big/file") == len(data)
    tail = len(data) - 1000
    assert store.get_range("big/file", tail, 1000) == data[tail:]
    assert (
        store.get_range("big/file", MULTIPART_PART - 10, 20)
        == data[MULTIPART_PART - 10 : MULTIPART_PART + 10]
    )


def _listed(store: ObjectStore, prefix: str, want: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The listing under ``prefix``, polled a few seconds until it is ``want``: a loaded
    SeaweedFS may list a put or a delete a moment late (S3 itself lists them at once)."""
    got: list[tuple[str, int]] = []
    for _ in range(50):
        got = [(o.key, o.size) for o in store.list(prefix)]
        if got == want:
            break
        time.sleep(0.1)
    return got


def test_list_by_prefix_then_delete(store: ObjectStore) -> None:
    for key in ("app1/s0/p0", "app1/s0/p1", "app1/s1/p0", "app2/s0/p0"):
        store.put(key, key.encode())
    want = [("app1/s0/p0", 10), ("app1/s0/p1", 10), ("app1/s1/p0", 10)]
    assert _listed(store, "app1/", want) == want
    store.delete([o.key for o in store.list("app1/")] + ["app1/never-there"])
    assert _listed(store, "app1/", []) == []
    assert _listed(store, "", [("app2/s0/p0", 10)]) == [("app2/s0/p0", 10)]
    store.delete([])


def test_walk_streams_the_listing_with_each_object_s_write_time(store: ObjectStore) -> None:
    before = time.time()
    for key in ("w/0/a", "w/0/b", "w/1/c"):
        store.put(key, b"x" * 3)
    want = [("w/0/a", 3), ("w/0/b", 3), ("w/1/c", 3)]
    assert _listed(store, "w/", want) == want
    walked = sorted(store.walk("w/"))
    assert walked == store.list("w/")
    # the server's clock stamps the objects: within a minute of ours either way
    assert all(before - 60 < o.modified < time.time() + 60 for o in walked)


def test_urls() -> None:
    assert parse_url("s3://bucket/a/prefix/") == ("s3", "bucket", "a/prefix")
    assert parse_url("s3://bucket") == ("s3", "bucket", "")
    for bad in ("http://x/y", "s3:///nobucket", "bucket/prefix"):
        with pytest.raises(ValueError, match="object-store url"):
            parse_url(bad)


def test_memory_urls_share_one_bucket_per_name() -> None:
    one, two = open_object_store("memory://shared-t/p"), open_object_store("memory://shared-t/p")
    one.put("x", b"1")
    assert two.get_range("x", 0, 1) == b"1"
    one.delete(["x"])


def test_a_writer_streams_one_final_object_in_parts(store: ObjectStore) -> None:
    data = os.urandom(WRITER_PART * 2 + 777)  # three parts
    writer = store.open_writer("w/big")
    for i in range(0, len(data), 1_000_000):
        writer.write(memoryview(data)[i : i + 1_000_000])
    assert store.size("w/big") is None  # nothing is visible before close
    writer.close()
    assert store.size("w/big") == len(data)
    assert store.get_range("w/big", WRITER_PART - 5, 10) == data[WRITER_PART - 5 : WRITER_PART + 5]
    small = store.open_writer("w/small")  # smaller than a part: one PUT at close
    small.write(b"abc")
    small.close()
    assert store.get_range("w/small", 0, 3) == b"abc"
    with pytest.raises(ObjectStoreError):
        small.write(b"more")


def test_an_aborted_writer_leaves_no_object(store: ObjectStore) -> None:
    writer = store.open_writer("w/gone")
    writer.write(os.urandom(WRITER_PART + 10))  # a part is already up
    writer.abort()
    writer.abort()  # idempotent
    assert store.size("w/gone") is None
    assert not store.list("w/")


def test_credentials_and_endpoint_from_an_aws_profile(
    seaweed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.seaweed import ACCESS_KEY, REGION, SECRET_KEY

    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text(f"[shuffles]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    config.write_text(f"[profile shuffles]\nregion = {REGION}\nendpoint_url = {seaweed.endpoint}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "shuffles")
    store = open_object_store(seaweed.new_bucket_url())
    try:
        store.put("from/a/profile", b"profiled")
        assert store.get_range("from/a/profile", 0, 8) == b"profiled"
    finally:
        store.close()
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(ObjectStoreError, match="nobody"):
        open_object_store(seaweed.new_bucket_url())
