"""The app key tag kept beside an app's files (PROTOCOL §5.4): written atomically, read back by a
restarted store, gone with the app's files, and never trusted when damaged or disagreeing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from croupier.storage.disk import DiskPartitionStore
from croupier.storage.index import IndexBuilder
from croupier.storage.store import LocationKey
from tests.storage.helpers import append, batch, key, seal

TAG = "0123456789abcdef"


def commit(store: DiskPartitionStore, k: LocationKey) -> None:
    f = store.create(k)
    builder = IndexBuilder(chunk_size=64)
    append(f, builder, [batch(0, 0, 0, b"abc"), seal(0, 0, 1)])
    f.commit(builder.build())


def test_the_tag_file_and_a_restarted_store_reads_it(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with DiskPartitionStore(dirs) as store:
        commit(store, key(app="app-1", shuffle=0))
        store.save_key_tag("app-1", TAG)
        store.save_key_tag("app-2", "")  # an app from before key tags
    for d in dirs:  # on every disk: the app's files may be on any of them
        assert (d / "app-1/key_tag").read_bytes() == f"{TAG}\n".encode()
        assert (d / "app-2/key_tag").read_bytes() == b"\n"
        assert not (d / "app-1/key_tag.tmp").exists()
    with DiskPartitionStore(dirs) as again:
        assert [c.key for c in again.scan()] == [key(app="app-1", shuffle=0)]  # not a location
        assert again.key_tag("app-1") == TAG and again.key_tag("app-2") == ""
        assert again.key_tag("app-3") is None


@pytest.mark.parametrize("content", [b"0123456789ABCDEF\n", b"0123456789abcdef", b"", b"xyz\n"])
def test_a_damaged_tag_file_is_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    (tmp_path / "d0/app-1").mkdir(parents=True)
    (tmp_path / "d0/app-1/key_tag").write_bytes(content)
    with DiskPartitionStore([tmp_path / "d0"]) as store, caplog.at_level(logging.WARNING):
        assert store.key_tag("app-1") is None
    assert "damaged key tag" in caplog.text


def test_disks_that_disagree_are_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for d, tag in (("d0", TAG), ("d1", "fedcba9876543210")):
        (tmp_path / d / "app-1").mkdir(parents=True)
        (tmp_path / d / "app-1/key_tag").write_text(f"{tag}\n")
    with DiskPartitionStore([tmp_path / "d0", tmp_path / "d1"]) as store, caplog.at_level(logging.WARNING):
        assert store.key_tag("app-1") is None
    assert "different key tags" in caplog.text


def test_the_tag_goes_with_the_apps_last_shuffle_or_the_app(tmp_path: Path) -> None:
    with DiskPartitionStore([tmp_path / "d0"]) as store:
        for shuffle in (0, 1):
            commit(store, key(app="app-1", shuffle=shuffle))
        store.save_key_tag("app-1", TAG)
        store.remove("app-1", 0)
        assert (tmp_path / "d0/app-1/key_tag").exists()  # shuffle 1 is still here
        store.remove("app-1", 1)
        assert not (tmp_path / "d0/app-1").exists() and store.key_tag("app-1") is None
        commit(store, key(app="app-1", shuffle=2))
        store.save_key_tag("app-1", TAG)  # written again, not taken as already there
        assert (tmp_path / "d0/app-1/key_tag").exists()
        store.remove("app-1")
        assert not (tmp_path / "d0/app-1").exists() and store.key_tag("app-1") is None


def test_a_tag_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with DiskPartitionStore([tmp_path / "d0"]) as store, caplog.at_level(logging.WARNING):
        (tmp_path / "d0/app-1").write_text("a file where the app's directory goes")
        store.save_key_tag("app-1", TAG)
        assert store.key_tag("app-1") is None
    assert "cannot keep the key tag of app app-1" in caplog.text
