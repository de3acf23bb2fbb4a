"""``--config FILE`` and ``CROUPIER_<COMMAND>_<FLAG>``: precedence CLI > environment > file >
defaults, on the real parser, and ``croupier config show``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from croupier.ops.config import config_path, env_name, layer_argv, load_file, show
from croupier.services.cli import build_parser, main
from croupier.services.cli.worker import worker_config


def parse(argv: list[str], config: Mapping[str, Any] | None, env: dict[str, str]) -> argparse.Namespace:
    parser = build_parser()
    return parser.parse_args(layer_argv(parser, argv, config, env).argv)


BASE = ["worker", "--master", "tcp://127.0.0.1:1"]


def test_defaults_then_file_then_env_then_cli() -> None:
    file = {"worker": {"memory": "2GiB", "slots": 7, "heartbeat": "3s", "fsync": True, "dirs": ["/a", "/b"]}}
    env = {"CROUPIER_WORKER_MEMORY": "3GiB", "CROUPIER_WORKER_THROTTLE_WINDOW": "1min"}
    assert parse(BASE, None, {}).memory == "1GiB"  # the default
    args = parse(BASE, file, {})
    assert (args.memory, args.slots, args.heartbeat, args.fsync, args.dirs) == (
        "2GiB",
        7,
        "3s",
        True,
        "/a,/b",
    )
    args = parse(BASE, file, env)
    assert args.memory == "3GiB" and args.throttle_window == "1min" and args.slots == 7
    args = parse([*BASE, "--memory", "4GiB", "--slots=9"], file, env)
    assert args.memory == "4GiB" and args.slots == 9 and args.throttle_window == "1min"
    assert worker_config(args).memory_cap == 4 * 2**30


def test_sources_name_where_each_value_came_from() -> None:
    parser = build_parser()
    layered = layer_argv(
        parser,
        [*BASE, "--memory", "4GiB"],
        {"worker": {"memory": "2GiB", "slots": 7}},
        {"CROUPIER_WORKER_SLOTS": "8", "CROUPIER_WORKER_HEARTBEAT": "2s"},
    )
    assert layered.sources["memory"] == "cli"
    assert layered.sources["slots"] == "env"
    assert layered.sources["heartbeat"] == "env"
    assert layered.sources["chunk-size"] == "default"
    assert parser.parse_args(layered.argv).slots == 8


def test_values_are_checked_as_flags_are() -> None:
    with pytest.raises(SystemExit):  # argparse's own error for a bad int
        parse(BASE, {"worker": {"slots": "many"}}, {})
    with pytest.raises(ValueError, match="unknown keys"):
        parse(BASE, {"worker": {"memroy": "1GiB"}}, {})
    with pytest.raises(ValueError, match="takes a value"):
        parse(BASE, {"worker": {"memory": True}}, {})


def test_boolean_flags_from_the_environment() -> None:
    assert parse(BASE, None, {"CROUPIER_WORKER_FSYNC": "yes"}).fsync is True
    assert parse(BASE, None, {"CROUPIER_WORKER_FSYNC": "0"}).fsync is False
    assert parse(BASE, {"worker": {"no-throttle": True}}, {}).no_throttle is True


def test_the_master_table_and_the_env_names() -> None:
    args = parse(
        ["master", "--listen", "127.0.0.1:0"], {"master": {"worker-timeout": "9s", "http": "off"}}, {}
    )
    assert args.worker_timeout == "9s" and args.http == "off"
    assert env_name("worker", "throttle-window") == "CROUPIER_WORKER_THROTTLE_WINDOW"


def test_config_path_and_a_bad_file(tmp_path: Path) -> None:
    assert config_path(["--config", "a.toml", "worker"], {}) == Path("a.toml")
    assert config_path(["--config=b.toml", "worker"], {"CROUPIER_CONFIG": "c.toml"}) == Path("b.toml")
    assert config_path(["worker"], {"CROUPIER_CONFIG": "c.toml"}) == Path("c.toml")
    assert config_path(["worker"], {}) is None
    bad = tmp_path / "bad.toml"
    bad.write_text("memory = [")
    with pytest.raises(ValueError, match=r"bad\.toml"):
        load_file(bad)


def test_config_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "croupier.toml"
    path.write_text('[worker]\nmemory = "2GiB"\nslots = 5\n')
    monkeypatch.setenv("CROUPIER_WORKER_SLOTS", "6")
    assert main(["--config", str(path), "config", "show", "worker", "--json"]) == 0
    rows = {r["flag"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["memory"] == {"flag": "memory", "value": "2GiB", "source": "file"}
    assert rows["slots"]["value"] == "6" and rows["slots"]["source"] == "env CROUPIER_WORKER_SLOTS"
    assert rows["chunk-size"]["source"] == "default"
    assert main(["config", "show", "worker", "--config", str(path)]) == 0
    assert "SOURCE" in capsys.readouterr().out
    assert show(build_parser(), "master", None, {})[0][2] == "default"
    assert main(["config", "show", "nope"]) == 2


def test_main_reports_a_bad_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[worker]\nmemroy = "1GiB"\n')
    assert main(["--config", str(path), "worker", "--master", "tcp://127.0.0.1:1"]) == 2
    assert "unknown keys ['memroy']" in capsys.readouterr().err


def test_croupier_local_takes_the_worker_settings_and_the_worker_table_and_environment() -> None:
    """Issue 22 §3.11: ``[worker]`` < ``[local]`` < ``CROUPIER_WORKER_*`` < ``CROUPIER_LOCAL_*`` < CLI."""
    file = {"worker": {"memory": "2GiB", "split-threshold": "1MiB"}, "local": {"memory": "3GiB"}}
    env = {"CROUPIER_WORKER_DISK_RESERVE": "7MiB", "CROUPIER_WORKER_CHUNK_SIZE": "2MiB"}
    args = parse(["local"], file, env)
    config = worker_config(args)
    assert (config.memory_cap, config.split_threshold, config.disk_reserve) == (3 * 2**30, 2**20, 7 * 2**20)
    assert config.chunk_size == 2 * 2**20
    env["CROUPIER_LOCAL_CHUNK_SIZE"] = "4MiB"
    assert worker_config(parse(["local", "--memory-tier-max", "0"], file, env)).chunk_size == 4 * 2**20
    assert worker_config(parse(["local", "--chunk-size", "5MiB"], file, env)).chunk_size == 5 * 2**20
    assert worker_config(parse(["local"], None, {})).heartbeat_interval is None  # told by the master
    rows = {flag: where for flag, _, where in show(build_parser(), "local", file, env)}
    assert rows["disk-reserve"] == "env CROUPIER_WORKER_DISK_RESERVE" and rows["split-threshold"] == "file"


def test_no_direct_io_reaches_the_workers_config_and_local_workers_command_lines(tmp_path: Path) -> None:
    from croupier.services.local import LocalCluster

    assert worker_config(parse(BASE, None, {})).direct_io is True
    off = worker_config(parse([*BASE, "--no-direct-io"], None, {}))
    assert off.direct_io is False
    assert "--no-direct-io" in LocalCluster(1, tmp_path, worker_config=off, processes=True)._worker_cli(0)
    assert "--no-direct-io" not in LocalCluster(1, tmp_path, processes=True)._worker_cli(0)
