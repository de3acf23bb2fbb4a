"""``--log-format json``: one JSON object per line, with the ids as fields."""

from __future__ import annotations

import json
import logging
import sys

from croupier.ops.logs import JsonFormatter
from croupier.services.cli import build_parser


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
