"""The JVM client's pure parts, checked by Java mains without servers: ZMTP framing and the
greeting, the reader's rules (winners, dedupe, the proof over a map range, digests), and the
batching of MAPPER_ENDs (EndChecks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.jvm.harness import run_java

CHECKS = ["io.croupier.zmtp.FrameChecks", "io.croupier.client.ReaderChecks", "io.croupier.client.EndChecks"]


@pytest.mark.parametrize("main", CHECKS)
def test_java_checks(java_cp: str, main: str) -> None:
    out = run_java(java_cp, main).stdout
    assert out.strip().splitlines()[-1] == "ok", out


def test_a_class_path_without_commons_codec_blake3_is_a_clear_error_at_start_up(
    java_cp: str, spark_jars: Path
) -> None:
    ours = java_cp.split(os.pathsep)[:2]  # the test mains and the client jar
    jackson = [str(p) for p in sorted(spark_jars.glob("jackson-*.jar"))]
    cp = os.pathsep.join([*ours, *jackson])
    done = run_java(cp, "io.croupier.test.JvmCli", "ping", "tcp://127.0.0.1:9", check=False)
    assert done.returncode != 0
    assert "org.apache.commons.codec.digest.Blake3" in done.stderr and "commons-codec" in done.stderr, (
        done.stderr
    )
