"""``--log-format json``: one JSON object per line, with the ids as fields."""

from __future__ import annotations

import json
import logging
import sys

from croupier.ops.logs import JsonFormatter
from croupier.services.cli import build_parser
from croupier.transports.log_context import LOG_FIELDS, body_fields, log_fields


def record(msg: str, **extra: object) -> logging.LogRecord:
    args = ("a",) if "%s" in msg else ()
    rec = logging.LogRecord("croupier.x", logging.WARNING, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_a_line_is_one_json_object_with_the_ids() -> None:
    fmt = JsonFormatter({"worker_id": "worker-1"})
    line = json.loads(fmt.format(record("pushed %s", app_id="app-9", shuffle_id=3)))
    assert line["msg"] == "pushed a" and line["level"] == "WARNING" and line["logger"] == "croupier.x"
    assert (line["worker_id"], line["app_id"], line["shuffle_id"]) == ("worker-1", "app-9", 3)
    assert line["ts"].endswith("+00:00")
    plain = json.loads(JsonFormatter().format(record("x")))
    assert "worker_id" not in plain and "app_id" not in plain


def test_a_traceback_is_one_field() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = record("failed")
        rec.exc_info = sys.exc_info()
    line = JsonFormatter().format(rec)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exc"]


def test_the_flag() -> None:
    parser = build_parser()
    assert parser.parse_args(["--log-format", "json", "config", "show", "worker"]).log_format == "json"
    assert parser.parse_args(["config", "show", "worker"]).log_format == "text"


def ids(line: str) -> tuple[object, object]:
    fields = json.loads(line)
    return fields.get("app_id"), fields.get("shuffle_id")


def test_a_line_logged_in_a_request_carries_its_ids() -> None:
    fmt = JsonFormatter({"worker_id": "worker-1"})
    with log_fields(app_id="a", shuffle_id=3):
        line = json.loads(fmt.format(record("x")))
    assert (line["app_id"], line["shuffle_id"], line["worker_id"]) == ("a", 3, "worker-1")
    assert ids(fmt.format(record("x"))) == (None, None)


def test_nested_requests_merge_and_reset_on_exit() -> None:
    fmt = JsonFormatter()
    with log_fields(app_id="a", shuffle_id=3):
        with log_fields(shuffle_id=4):
            assert ids(fmt.format(record("x"))) == ("a", 4)
            with log_fields(app_id=None):  # None keeps the outer value
                assert ids(fmt.format(record("x"))) == ("a", 4)
        assert ids(fmt.format(record("x"))) == ("a", 3)
        try:
            with log_fields(app_id="b"):
                raise ValueError
        except ValueError:
            pass
        assert ids(fmt.format(record("x"))) == ("a", 3)  # reset on an exception too
    assert LOG_FIELDS.get() is None


def test_extra_wins_over_the_request_and_the_request_over_the_process() -> None:
    fmt = JsonFormatter({"app_id": "process", "shuffle_id": 1})
    with log_fields(app_id="request", shuffle_id=2):
        assert ids(fmt.format(record("x", app_id="extra"))) == ("extra", 2)
        assert ids(fmt.format(record("x", shuffle_id=9))) == ("request", 9)
    assert ids(fmt.format(record("x"))) == ("process", 1)


def test_a_body_gives_only_a_str_app_id_and_an_int_shuffle_id() -> None:
    assert body_fields({}) is None and body_fields({"other": 1}) is None
    assert body_fields({"app_id": "app-1", "shuffle_id": 2}) == {"app_id": "app-1", "shuffle_id": 2}
    assert body_fields({"app_id": {"a": [1]}, "shuffle_id": True}) is None
    assert body_fields({"app_id": ["x"], "shuffle_id": 2**64}) is None
    assert body_fields({"app_id": 7, "shuffle_id": "3"}) is None
    cut = body_fields({"app_id": "x" * 100_000})
    assert cut is not None and cut["app_id"] == "x" * 128 + "..."
