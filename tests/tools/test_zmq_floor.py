"""The ZeroMQ floor of ``croupier bench``'s metrics scenario: real processes, real sockets."""

from __future__ import annotations

import json

import pytest

from croupier.tools.zmq_floor import main, zmq_floor


def test_direct_and_relayed_round_trips_are_measured() -> None:
    found = zmq_floor(4096, count=20, interval=0.001)
    assert found["size"] == 4096 and found["interval_s"] == 0.001
    for name in ("direct", "relayed"):
        s = found[name]
        assert s["count"] == 20
        assert 0 < s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]


def test_the_command_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["1KiB", "5", "0.001"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["size"] == 1024 and found["relayed"]["count"] == 5
