"""Fuzz the file event log's readers (issue 13): a segment or a snapshot with random
damage opens as a valid log (a torn tail cut off) or raises ``LogCorrupted``; never
another exception, never a hang.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from croupier.ha.eventlog import LogCorrupted
from croupier.ha.filelog import FileEventLog
from tests.fuzz.budget import fuzz_settings, ran
from tests.fuzz.mutate import mutated

GROUPS = [[b"one", b"two"], [b"three"], [b"x" * 300, b"", b"y"]]


@pytest.fixture(scope="module")
def pristine() -> Iterator[Path]:
    """A log of three groups (two segments) and a snapshot, made once and copied per input."""
    root = Path(tempfile.mkdtemp(prefix="croupier-fuzz-"))
    with FileEventLog(root / "log", segment_bytes=64) as log:
        for group in GROUPS[:2]:
            log.append(group)
        log.write_snapshot(2, b"snapshot state")
        log.append(GROUPS[2])
    yield root / "log"
    shutil.rmtree(root)


def _open_and_read(directory: Path) -> None:
    try:
        with FileEventLog(directory, segment_bytes=64) as log:
            snapshot = log.latest_snapshot()
            seqs = [seq for seq, _ in log.read(snapshot[0] if snapshot else 0)]
            assert seqs == sorted(set(seqs))
            log.append([b"after"])
    except LogCorrupted:
        return


def _damaged(pristine: Path, pick: int, data: bytes, suffix: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix="croupier-fuzz-")) / "log"
    shutil.copytree(pristine, work)
    targets = sorted(p for p in work.iterdir() if p.name.endswith(suffix))
    targets[pick % len(targets)].write_bytes(data)
    return work


@fuzz_settings(files=True)
@given(st.data(), st.integers(0, 9))
def test_segment(pristine: Path, data: st.DataObject, pick: int) -> None:
    ran("file-log segments (ha/filelog.py recovery and read)")
    segments = sorted(p for p in pristine.iterdir() if p.suffix == ".seg")
    original = segments[pick % len(segments)].read_bytes()
    raw = data.draw(st.one_of(mutated(st.just(original)), st.binary(max_size=200)))
    work = _damaged(pristine, pick, raw, ".seg")
    try:
        _open_and_read(work)
    finally:
        shutil.rmtree(work.parent)


@fuzz_settings(files=True)
@given(st.data())
def test_snapshot(pristine: Path, data: st.DataObject) -> None:
    ran("file-log snapshots (ha/filelog.py _read_snapshot)")
    original = next(p for p in pristine.iterdir() if p.suffix == ".snap").read_bytes()
    raw = data.draw(st.one_of(mutated(st.just(original)), st.binary(max_size=100)))
    work = _damaged(pristine, 0, raw, ".snap")
    try:
        _open_and_read(work)
    finally:
        shutil.rmtree(work.parent)
