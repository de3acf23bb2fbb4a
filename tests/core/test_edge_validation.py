"""Strict validation at the edge (issue 13): hosts, URLs, free text and lone surrogates.

Each case here was accepted before, and reached the event log or a ZeroMQ endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from croupier.core.codec import from_json
from croupier.core.commands import (
    ExcludeWorker,
    LoseWorker,
    RegisterWorker,
    RevivePartition,
    TakeOver,
    decode_command,
    encode_command,
)
from croupier.core.dataplane import Push
from croupier.core.errors import BadRequest
from croupier.core.events import decode_event
from croupier.core.ids import MAX_TEXT_BYTES
from croupier.core.urls import check_host, check_tcp_url
from croupier.core.wire import decode_body

REGISTER: dict[str, Any] = encode_command(RegisterWorker("w1", "h1", 1, 2, 3, 4, 10, "inc"))[1]


def decode_wire(msg_type: int, raw: str) -> object:
    """As a server does: the body frame's bytes, then the command."""
    return decode_command(msg_type, decode_body(raw.encode()))


@pytest.mark.parametrize(
    "host",
    [
        "\ud800",
        "h\udfff",
        "a b",
        "h\x00",
        "tcp://h",
        "h/x",
        "-" * 64,
        "a." * 127 + "bb",
        "",
        "h:1",
        "\u2603\ud800",
    ],
)
def test_bad_hosts_are_refused(host: str) -> None:
    body = json.dumps({**REGISTER, "host": host})  # ensure_ascii: a lone surrogate as \ud800
    with pytest.raises(BadRequest):
        decode_wire(10, body)


@pytest.mark.parametrize("host", ["h1", "worker-3.rack_2.example.com", "127.0.0.1", "::1", "bücher.example"])
def test_good_hosts_pass(host: str) -> None:
    assert check_host(host) == host


@pytest.mark.parametrize("port", [0, 65536, -1, True])
def test_ports_out_of_range_are_refused(port: object) -> None:
    with pytest.raises(BadRequest):
        decode_command(10, {**REGISTER, "push_port": port})


@pytest.mark.parametrize(
    "url",
    [
        "tcp://\ud800:7001",
        "zk://h:2181/x",
        "tcp://h",
        "tcp://h:0",
        "tcp://h:70000",
        "tcp://::1:5",
        "tcp://[h]:5",
        "tcp://h:5 ",
        "tcp://h:٣",
    ],
)
def test_bad_replica_urls_are_refused(url: str) -> None:
    body = {
        "app_id": "a",
        "shuffle_id": 0,
        "incarnation": "i",
        "batches": [[0, 0]],
        "replica": {"worker_id": "w2", "url": url, "incarnation": "i2"},
    }
    with pytest.raises(BadRequest):
        push = from_json(Push, decode_body(json.dumps(body).encode()))
        push.validate()


@pytest.mark.parametrize("url", ["tcp://h1:7001", "tcp://[::1]:7001", "tcp://10.0.0.1:1"])
def test_good_tcp_urls_pass(url: str) -> None:
    assert check_tcp_url(url) == url


@pytest.mark.parametrize(
    "cmd",
    [
        LoseWorker("w1", "x" * (MAX_TEXT_BYTES + 1)),
        ExcludeWorker("w1", True, "é" * (MAX_TEXT_BYTES // 2 + 1)),
        RevivePartition("a", 0, 0, 0, "x" * (MAX_TEXT_BYTES + 1)),
    ],
)
def test_reasons_over_one_kib_are_refused(cmd: LoseWorker | ExcludeWorker | RevivePartition) -> None:
    msg_type, body = encode_command(cmd)
    with pytest.raises(BadRequest, match="reason"):
        decode_command(msg_type, body)
    msg_type, body = encode_command(type(cmd)(**{**body, "reason": "x" * MAX_TEXT_BYTES}))
    decode_command(msg_type, body)


def test_leader_must_be_a_tcp_url() -> None:
    with pytest.raises(BadRequest):
        TakeOver(1, "tcp://\ud800:1").validate()


@pytest.mark.parametrize("field", ["name", "app_id"])
def test_codec_names_the_field_holding_a_lone_surrogate(field: str) -> None:
    body = json.dumps({"name": "n", "app_id": "a", field: "x\udc80"})
    with pytest.raises(BadRequest, match=f"RegisterApp.{field}: not valid Unicode"):
        decode_wire(20, body)


def test_events_with_lone_surrogates_are_refused() -> None:
    raw = json.dumps({"e": "AppRegistered", "v": 1, "app_id": "a", "name": "\ud800"}).encode()
    with pytest.raises(BadRequest, match="not valid Unicode"):
        decode_event(raw)


@pytest.mark.parametrize("raw", [b'{"a":NaN}', b'{"a":[Infinity]}', b'{"a":-Infinity}'])
def test_bodies_with_non_json_numbers_are_refused(raw: bytes) -> None:
    with pytest.raises(BadRequest, match="not a JSON number"):
        decode_body(raw)


def test_infinite_floats_are_refused_by_the_codec() -> None:
    body = {"app_id": "a", "num_mappers": 1, "num_partitions": 1, "loads": {"w": 1e400}}
    with pytest.raises(BadRequest, match="finite"):
        decode_command(30, body)


@pytest.mark.parametrize("key", ["²", "1" * 5000, "٣"])
def test_int_keys_that_int_cannot_read_are_bad_request(key: str) -> None:
    @dataclass
    class Keyed:
        counts: dict[int, int]

    with pytest.raises(BadRequest):
        from_json(Keyed, {"counts": {key: 1}})
