"""Issue 13: a master whose log cannot be replayed exits non-zero with ``LogCorrupted``
before it prints its URL (it used to print the URL and hang, serving nothing)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from croupier.ha.filelog import FileEventLog
from integration.procs import CLI

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "event",
    [{"e": "NoSuchKind", "v": 1}, {"e": "AppUnregistered", "v": 1, "app_id": "never-registered"}],
    ids=["unknown kind", "rejected by the fold"],
)
def test_an_unreplayable_log_stops_the_master_before_its_url(
    tmp_path: Path, event: dict[str, object]
) -> None:
    with FileEventLog(tmp_path / "data") as log:
        log.append([json.dumps(event).encode()])
    args = [*CLI, "master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1
    assert out.stdout == ""
    assert "croupier master: INTERNAL (LogCorrupted): event log corrupted: record 1" in out.stderr


def test_an_empty_segment_stops_the_master_before_its_url(tmp_path: Path) -> None:
    with FileEventLog(tmp_path / "data") as log:
        log.append([b"{}"])
    next((tmp_path / "data").glob("log-*.seg")).write_bytes(b"")
    args = [*CLI, "master", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert (out.returncode, out.stdout) == (1, "")
    assert "the segment is empty" in out.stderr
