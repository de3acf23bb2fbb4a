"""The JVM client's pure parts, checked by Java mains without servers: ZMTP framing and the
greeting, and the reader's rules (winners, dedupe, the proof over a map range, digests)."""

from __future__ import annotations

import pytest

from tests.jvm.harness import run_java


@pytest.mark.parametrize("main", ["io.croupier.zmtp.FrameChecks", "io.croupier.client.ReaderChecks"])
def test_java_checks(java_cp: str, main: str) -> None:
    out = run_java(java_cp, main).stdout
    assert out.strip().splitlines()[-1] == "ok", out
