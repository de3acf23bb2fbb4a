"""Every test vector of PROTOCOL.md, checked by the JVM client's codec (a Java main)."""

from __future__ import annotations

from pathlib import Path

from tests.jvm.harness import run_java

PROTOCOL = (Path(__file__).resolve().parents[2] / "PROTOCOL.md").read_text()


def test_the_java_codec_reproduces_every_protocol_vector(java_cp: str) -> None:
    out = run_java(java_cp, "io.croupier.test.ProtocolVectors").stdout
    assert out.strip().endswith("ok"), out
    vectors = [line.split(" ", 2) for line in out.splitlines() if line.startswith("vector ")]
    names = {name for _, name, _ in vectors}
    assert {"status-header", "member-key", "app-key", "get-shuffle-mac", "curve-public-z85"} <= names
    assert {"batch-digest", "seal-digest", "seal-digest-unkeyed", "bitmap", "winner-runs"} <= names
    assert "app-handle" in names
    flat = " ".join(PROTOCOL.split())
    for _, name, value in vectors:
        # each expected value is the document's own text, so a changed vector fails here
        assert value in PROTOCOL or value in flat or value.replace(" ", "") in PROTOCOL.replace(" ", ""), name
