"""One config file for the command line: ``croupier --config croupier.toml COMMAND ...``.

The file is TOML with a table per command (``[master]``, ``[worker]``, ``[local]``, ...);
its keys are the command's long flag names without the dashes (``memory``,
``throttle-window``, ``http``). Environment variables ``CROUPIER_<COMMAND>_<FLAG>`` (upper
case, dashes as underscores: ``CROUPIER_WORKER_MEMORY=2GiB``) override the file, and the
command line overrides both: precedence is CLI > environment > file > defaults.

``croupier local`` takes the worker settings too (``--memory``, ``--split-threshold``, ...),
for its workers: the ``[worker]`` table and ``CROUPIER_WORKER_*`` apply to them, below
``[local]`` and ``CROUPIER_LOCAL_*`` in each layer (``[worker]`` < ``[local]`` <
``CROUPIER_WORKER_*`` < ``CROUPIER_LOCAL_*`` < the command line).

How: the file's and the environment's values become flags placed before the command
line's own (argparse keeps the last value of a flag), so argparse converts and checks
them as it does typed flags. A boolean flag (``--fsync``) is set by ``true`` in the file
or ``1``/``true``/``yes``/``on`` in the environment, and cannot be unset by either.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Layered", "config_path", "env_name", "layer_argv", "load_file", "show"]

_TRUE = {"1", "true", "yes", "on"}
_INHERITS = {"local": "worker"}  # a command that takes another's flags, and their values


def env_name(command: str, flag: str) -> str:
    """``CROUPIER_WORKER_THROTTLE_WINDOW`` for ``worker`` ``--throttle-window``."""
    return f"CROUPIER_{command}_{flag}".upper().replace("-", "_")


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML file's tables.

    Raises:
        ValueError: the file cannot be read or is not TOML (the message names it).
    """
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"config file {path}: {exc}") from exc


@dataclass
class Layered:
    """The command line to parse, and where each flag of the command got its value."""

    argv: list[str]
    sources: dict[str, str]  # flag name (no dashes) -> "cli", "env", "file" or "default"


def _flags(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    out = {}
    for action in sub._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in ("help",):
            out[longs[0][2:]] = action
    return out


def _tokens(flag: str, action: argparse.Action, value: Any, where: str) -> list[str]:
    if isinstance(action, argparse._StoreTrueAction):
        on = value if isinstance(value, bool) else str(value).strip().lower() in _TRUE
        return [f"--{flag}"] if on else []
    if isinstance(value, bool | dict):
        raise ValueError(f"{where}: --{flag} takes a value, not {value!r}")
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    return [f"--{flag}={value}"]


def _command_index(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[int, str] | None:
    commands = _subcommands(parser)
    for i, token in enumerate(argv):
        if token in commands:
            return i, token
    return None


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _given(flag: str, action: argparse.Action, cli: Sequence[str]) -> bool:
    names = set(action.option_strings)
    return any(t in names or t.split("=", 1)[0] in names for t in cli) or f"--{flag}" in cli


def layer_argv(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    config: Mapping[str, Any] | None,
    env: Mapping[str, str],
) -> Layered:
    """``argv`` with the file's and the environment's values of its command's flags inserted
    right after the command name (file first, then environment, then the command line's).

    Raises:
        ValueError: a key of the command's table is not one of its flags, or has the wrong shape.
    """
    found = _command_index(parser, argv)
    if found is None:
        return Layered(list(argv), {})
    i, command = found
    flags = _flags(_subcommands(parser)[command])
    table = dict((config or {}).get(command, {}))
    unknown = sorted(set(table) - set(flags))
    if unknown:
        raise ValueError(f"config file [{command}]: unknown keys {unknown}; keys are the flags' names")
    cli = list(argv[i + 1 :])
    inserted: list[str] = []
    sources: dict[str, str] = {}
    for flag, action in flags.items():
        if _given(flag, action, cli):
            sources[flag] = "cli"
        layers = _layers(parser, command, flag, config, env)
        for kind, where, value in layers:
            inserted += _tokens(flag, action, value, where)
            if sources.get(flag) != "cli":
                sources[flag] = kind
        sources.setdefault(flag, "default")
    return Layered([*argv[: i + 1], *inserted, *cli], sources)


def _layers(
    parser: argparse.ArgumentParser,
    command: str,
    flag: str,
    config: Mapping[str, Any] | None,
    env: Mapping[str, str],
) -> list[tuple[str, str, Any]]:
    """``(kind, where, value)`` of ``flag`` from the file and the environment, lowest first:
    a command's inherited command's (``_INHERITS``) before its own in each layer."""
    commands = [command]
    base = _INHERITS.get(command)
    if base is not None and flag in _flags(_subcommands(parser)[base]):
        commands.insert(0, base)
    out: list[tuple[str, str, Any]] = []
    for c in commands:
        table = (config or {}).get(c, {})
        if flag in table:
            out.append(("file", f"config file [{c}]", table[flag]))
    for c in commands:
        name = env_name(c, flag)
        if name in env:
            out.append(("env", f"${name}", env[name]))
    return out


def show(
    parser: argparse.ArgumentParser, command: str, config: Mapping[str, Any] | None, env: Mapping[str, str]
) -> list[tuple[str, Any, str]]:
    """``croupier config show``: each flag of ``command`` with its value from the environment,
    the file or its default (as given, before conversion) and where it came from."""
    subs = _subcommands(parser)
    if command not in subs:
        raise ValueError(f"no command {command!r}; one of {sorted(subs)}")
    rows = []
    for flag, action in _flags(subs[command]).items():
        layers = _layers(parser, command, flag, config, env)
        if not layers:
            rows.append((flag, action.default, "default"))
            continue
        kind, where, value = layers[-1]
        rows.append((flag, value, f"env {where[1:]}" if kind == "env" else "file"))
    return rows


def config_path(argv: Sequence[str], env: Mapping[str, str]) -> Path | None:
    """``--config FILE`` (or ``--config=FILE``) before the command, else ``$CROUPIER_CONFIG``."""
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if token.startswith("--config="):
            return Path(token.split("=", 1)[1])
    value = env.get("CROUPIER_CONFIG")
    return Path(value) if value else None
