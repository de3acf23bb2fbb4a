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
from collections.abc import Callable
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


Converter = Callable[[Any, str], Any]
_PLANS: dict[type, tuple[list[tuple[str, Converter, bool]], frozenset[str]]] = {}


def _plan(cls: type) -> tuple[list[tuple[str, Converter, bool]], frozenset[str]]:
    """Per class, once: each field's name, converter and whether it is required."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = [
            (
                f.name,
                _compile(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
            if f.init
        ]
        plan = _PLANS[cls] = (fields, frozenset(name for name, _, _ in fields))
    return plan


def from_json(cls: type[T], data: Any, path: str = "") -> T:
    """Build ``cls`` from JSON values, checking the shape of every field.

    Raises:
        BadRequest: a missing or unknown field, or a value of the wrong type.
    """
    where = path or cls.__name__
    if not isinstance(data, dict):
        raise BadRequest(f"{where}: expected an object, got {type(data).__name__}")
    fields, names = _plan(cls)
    kwargs: dict[str, Any] = {}
    for name, convert, required in fields:
        if name in data:
            kwargs[name] = convert(data[name], f"{where}.{name}")
        elif required:
            raise BadRequest(f"{where}: missing field {name!r}")
    if len(data) > len(kwargs):
        extra = set(data) - names
        if extra:
            raise BadRequest(f"{where}: unknown fields {sorted(extra)}")
    try:
        return cls(**kwargs)
    except BadRequest:
        raise
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{where}: {exc}") from exc


def _expect(kind: str, value: Any, path: str) -> BadRequest:
    return BadRequest(f"{path}: expected {kind}, got {type(value).__name__}")


def _int(value: Any, path: str) -> int:
    if type(value) is not int:
        raise _expect("an integer", value, path)
    return value


def _str(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _expect("a string", value, path)
    return value


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _expect("a boolean", value, path)
    return value


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _expect("a number", value, path)
    return float(value)


def _any(value: Any, path: str) -> Any:
    return value


def _compile(tp: Any) -> Converter:
    """A converter that checks and converts JSON values of type ``tp``."""
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # typing.NewType: check as the underlying type
        return _compile(supertype)
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _compile_union(tp)
    if origin is tuple:
        return _compile_tuple(tp)
    if origin is dict:
        return _compile_dict(tp)
    if dataclasses.is_dataclass(tp):
        cls = typing.cast(type, tp)
        return lambda value, path: from_json(cls, value, path)
    simple: dict[Any, Converter] = {Any: _any, bool: _bool, int: _int, float: _float, str: _str}
    if tp in simple:
        return simple[tp]

    def unsupported(value: Any, path: str) -> Any:
        raise TypeError(f"{path}: unsupported field type {tp!r}")  # a bug in a message definition

    return unsupported


def _compile_union(tp: Any) -> Converter:
    """``A | B | None``: the first option that accepts the value wins."""
    args = typing.get_args(tp)
    nullable = type(None) in args
    options = [_compile(a) for a in args if a is not type(None)]

    def union(value: Any, path: str) -> Any:
        if value is None and nullable:
            return None
        for option in options:
            try:
                return option(value, path)
            except BadRequest:
                continue
        raise BadRequest(f"{path}: {value!r} does not match {tp}")

    return union


def _compile_tuple(tp: Any) -> Converter:
    """``tuple[X, ...]`` or ``tuple[X, Y]`` from a JSON list."""
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        item = _compile(args[0])

        def var_tuple(value: Any, path: str) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise _expect("a list", value, path)
            return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

        return var_tuple
    items = [_compile(a) for a in args]

    def fixed_tuple(value: Any, path: str) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise _expect("a list", value, path)
        if len(items) != len(value):
            raise BadRequest(f"{path}: expected {len(items)} items, got {len(value)}")
        return tuple(conv(v, f"{path}[{i}]") for i, (conv, v) in enumerate(zip(items, value, strict=True)))

    return fixed_tuple


def _compile_dict(tp: Any) -> Converter:
    """``dict[K, V]`` from a JSON object; int keys arrive as strings and are converted back."""
    key_t, val_t = typing.get_args(tp)
    key_conv, val_conv = _compile(key_t), _compile(val_t)

    def mapping(value: Any, path: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise _expect("an object", value, path)
        out = {}
        for k, v in value.items():
            key = int(k) if key_t is int and isinstance(k, str) and k.lstrip("-").isdigit() else k
            out[key_conv(key, f"{path}.key")] = val_conv(v, f"{path}.{k}")
        return out

    return mapping
