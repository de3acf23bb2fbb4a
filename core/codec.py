"""Dataclass <-> JSON conversion with shape checking.

Commands, events and replies are frozen dataclasses whose fields are JSON
types: ``int``, ``str``, ``bool``, ``float``, ``X | None``, ``tuple[X, ...]``,
fixed ``tuple[X, Y]`` and ``dict[str, X]``. ``from_json`` checks every field and
raises ``BadRequest`` with the field's path, so a wrong shape off the wire is a
clear error rather than a crash deep in the master.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, Union

from croupier.core.errors import BadRequest

__all__ = ["from_json", "to_json"]

T = TypeVar("T")


def to_json(obj: Any) -> Any:
    """Turn a dataclass (recursively) into JSON-ready values; tuples become lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    return obj


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def from_json(cls: type[T], data: Any, path: str = "") -> T:
    """Build ``cls`` from JSON values, checking the shape of every field.

    Raises:
        BadRequest: a missing or unknown field, or a value of the wrong type.
    """
    where = path or cls.__name__
    if not isinstance(data, dict):
        raise BadRequest(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    names = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        names.add(f.name)
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise BadRequest(f"{where}: missing field {f.name!r}")
    extra = set(data) - names
    if extra:
        raise BadRequest(f"{where}: unknown fields {sorted(extra)}")
    try:
        return cls(**kwargs)
    except BadRequest:
        raise
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{where}: {exc}") from exc


def _convert(tp: Any, value: Any, path: str) -> Any:
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # typing.NewType: check as the underlying type
        return _convert(supertype, value, path)
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except BadRequest:
                continue
        raise BadRequest(f"{path}: {value!r} does not match {tp}")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise BadRequest(f"{path}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise BadRequest(f"{path}: expected {len(args)} items, got {len(value)}")
        return tuple(_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise BadRequest(f"{path}: expected an object, got {type(value).__name__}")
        out = {}
        for k, v in value.items():
            key = int(k) if key_t is int and isinstance(k, str) and k.lstrip("-").isdigit() else k
            out[_convert(key_t, key, f"{path}.key")] = _convert(val_t, v, f"{path}.{k}")
        return out
    if dataclasses.is_dataclass(tp):
        return from_json(typing.cast(type, tp), value, path)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise BadRequest(f"{path}: expected a boolean, got {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequest(f"{path}: expected an integer, got {type(value).__name__}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRequest(f"{path}: expected a number, got {type(value).__name__}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise BadRequest(f"{path}: expected a string, got {type(value).__name__}")
        return value
    raise TypeError(f"{path}: unsupported field type {tp!r}")  # a bug in a message definition
