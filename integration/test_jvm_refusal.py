"""The JVM client's ZMTP DEALER against a master past its connection budget (PROTOCOL §1):
the ZAP refusal (ZMTP ERROR "400") is reported by name, and the client closes, backs off and
connects again until the master has room."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import zmq

from integration.test_master_fd_budget import IDLE, LowFdMaster, _handshake
from tests.jvm.harness import build_test_classpath, run_java, spark_jars_or_skip

pytestmark = pytest.mark.integration

CLI = "io.croupier.test.JvmCli"


def test_a_refused_java_client_names_the_budget_then_gets_in_once_there_is_room(tmp_path: Path) -> None:
    cp = build_test_classpath(spark_jars_or_skip())
    master = LowFdMaster(tmp_path)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    idle: list[zmq.Socket[bytes]] = []
    waiting: subprocess.Popen[str] | None = None
    try:
        event = 0
        while len(idle) < IDLE and event != zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            sock, event = _handshake(ctx, master.url)
            idle.append(sock)
        assert event == zmq.EVENT_HANDSHAKE_FAILED_AUTH, master.log()[-2000:]
        out = run_java(cp, CLI, "ping", master.url, "2", check=False).stdout
        assert 'ZMTP ERROR "400"' in out and "connection budget" in out, out
        # a client that keeps trying gets in once idle connections go away
        waiting = subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-cp", cp, CLI, "ping", master.url, "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(3.0)  # let it be refused a few times (the first run above shows how)
        for sock in idle:
            sock.close(linger=0)
        idle.clear()
        stdout, _ = waiting.communicate(timeout=120)
        assert stdout.strip().endswith("ok"), stdout
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
        for sock in idle:
            sock.close(linger=0)
        ctx.term()
        master.stop()
