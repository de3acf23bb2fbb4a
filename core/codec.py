"""Dataclass <-> JSON conversion with shape checking.

Commands, events and replies are frozen dataclasses whose fields are JSON
types: ``int``, ``str``, ``bool``, ``float``, ``X | None``, ``tuple[X, ...]``,
fixed ``tuple[X, Y]``, ``dict[str, X]``, ``StrEnum`` subclasses (their wire
strings) and nested dataclasses. ``from_json`` checks every field and raises
``BadRequest`` with the field's path, so a wrong shape off the wire is a clear
error rather than a crash deep in the master.

A field declared ``field(default=None, metadata=OMITTED_WHEN_NONE)`` is left out of ``to_json``'s
object while it is ``None`` (``from_json`` accepts it absent), for wire
objects whose optional keys are absent rather than ``null``.

Stateless apart from per-class caches (filled once, safe to share between threads).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, Union

from croupier.core.codec_compile import Fast, compile_decoder, compile_encoder
from croupier.core.errors import BadRequest

__all__ = ["OMITTED_WHEN_NONE", "from_json", "to_json"]

T = TypeVar("T")

_OMIT_NONE = "croupier.omit_none"
OMITTED_WHEN_NONE: Mapping[str, bool] = MappingProxyType({_OMIT_NONE: True})
"""Field metadata: ``to_json`` leaves the field out of the object while its value is ``None``."""
_PLAIN = frozenset({str, int, float, bool, type(None)})
Encoder = Callable[[Any, dict[int, tuple[Any, Any]]], Any]
_ENCODERS: dict[type, Encoder] = {}


def to_json(obj: Any) -> Any:
    """Turn a dataclass (recursively) into JSON-ready values; tuples become lists.

    ``StrEnum`` members become their plain wire strings. A frozen dataclass
    instance that occurs several times (a worker's address in every location
    of a batch reply) is encoded once, and its JSON object is shared within
    the result: change the result's nested objects only after copying them.
    """
    return _encode(obj, {})


def _encode(obj: Any, seen: dict[int, tuple[Any, Any]]) -> Any:
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        encoder = _ENCODERS[kind] = _encoder(kind)
    return encoder(obj, seen)


def _encoder(kind: type) -> Encoder:
    """Per type, once: how ``to_json`` encodes its values."""
    if issubclass(kind, enum.Enum):
        return lambda obj, seen: obj.value
    if issubclass(kind, tuple | list):
        return lambda obj, seen: [_encode(v, seen) for v in obj]
    if issubclass(kind, dict):
        return lambda obj, seen: {str(k): _encode(v, seen) for k, v in obj.items()}
    if dataclasses.is_dataclass(kind):
        return _dataclass_encoder(kind)
    return lambda obj, seen: obj


def _dataclass_encoder(cls: type) -> Encoder:
    try:
        hints = typing.get_type_hints(cls)
    except NameError:  # a class defined where its annotations cannot be resolved: check every value
        hints = {}
    # (name, whether the value is a JSON scalar as it is, whether None is left out)
    fields = [
        (f.name, _is_plain(hints.get(f.name)), bool(f.metadata.get(_OMIT_NONE)))
        for f in dataclasses.fields(cls)
    ]

    encode = compile_encoder(fields, _encode)  # straight-line code (codec_compile)

    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        return encode

    def shared(obj: Any, seen: dict[int, tuple[Any, Any]]) -> Any:
        # keyed by id: the entry keeps ``obj`` alive, so the id cannot be reused meanwhile
        hit = seen.get(id(obj))
        if hit is None:
            hit = seen[id(obj)] = (obj, encode(obj, seen))
        return hit[1]

    return shared


def _is_plain(tp: Any) -> bool:
    """Whether values of type ``tp`` are JSON scalars that need no conversion."""
    if tp in _PLAIN:
        return True
    origin = typing.get_origin(tp)
    return origin in (Union, types.UnionType) and all(a in _PLAIN for a in typing.get_args(tp))


Converter = Callable[[Any, str], Any]
# an int key as JSON spells it: ASCII digits only ("²".isdigit() is true), never more than an int id holds
_INT_KEY = re.compile(r"-?[0-9]{1,19}")
Plan = tuple[list[tuple[str, Converter, bool]], frozenset[str], Fast]
_PLANS: dict[type, Plan] = {}


def _plan(cls: type) -> Plan:
    """Per class, once: each field's name, converter and whether it is required; the names;
    the compiled fast path (``codec_compile.compile_decoder``)."""
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
        fast = compile_decoder(cls, fields, _inline_checks())
        plan = _PLANS[cls] = (fields, frozenset(name for name, _, _ in fields), fast)
    return plan


def _inline_checks() -> dict[Converter, str]:
    """The converters that ``compile_decoder`` may inline: each expression is true exactly
    when the converter returns ``{v}`` unchanged (``_str`` checks more of a non-ASCII one)."""
    return {_int: "type({v}) is int", _bool: "type({v}) is bool", _str: "type({v}) is str and {v}.isascii()"}


def from_json(cls: type[T], data: Any, path: str = "") -> T:
    """Build ``cls`` from JSON values, checking the shape of every field.

    Raises:
        BadRequest: a missing or unknown field, or a value of the wrong type.
    """
    where = path or cls.__name__
    if not isinstance(data, dict):
        raise BadRequest(f"{where}: expected an object, got {type(data).__name__}")
    try:  # the common case: every field, each well-formed; else the checks say what is wrong
        built = _plan(cls)[2](data)
    except (BadRequest, TypeError, ValueError):
        built = None
    if built is not None:
        return typing.cast(T, built)
    return _checked_from_json(cls, data, where)


def _checked_from_json(cls: type[T], data: dict[str, Any], where: str) -> T:
    """``from_json`` field by field, each converter told its path: the errors come from here."""
    fields, names, _ = _plan(cls)
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
    if not value.isascii():
        # JSON may spell a lone surrogate ("\ud800"): such a string cannot be encoded
        # again, and would kill whichever thread next writes it to a socket or a file.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(f"{path}: not valid Unicode ({exc.reason} at index {exc.start})") from exc
    return value


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _expect("a boolean", value, path)
    return value


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _expect("a number", value, path)
    try:
        number = float(value)
    except OverflowError as exc:  # an integer beyond any float
        raise BadRequest(f"{path}: {value!r:.40} is out of range") from exc
    if not math.isfinite(number):
        # Python's json reads NaN and Infinity, which JSON has not: nothing could encode them again
        raise BadRequest(f"{path}: expected a finite number, got {number}")
    return number


def _any(value: Any, path: str) -> Any:
    return value


def _nullable(convert: Converter) -> Converter:
    """``X | None``: the error of ``X`` itself, so its path points into the value."""

    def nullable(value: Any, path: str) -> Any:
        return None if value is None else convert(value, path)

    return nullable


def _enum(cls: type[enum.StrEnum]) -> Converter:
    members = {m.value: m for m in cls}

    def member(value: Any, path: str) -> enum.StrEnum:
        if type(value) is not str:
            raise _expect("a string", value, path)
        found = members.get(value)
        if found is None:
            raise BadRequest(f"{path}: {value!r} is not one of {sorted(members)}")
        return found

    return member


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
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return _enum(tp)
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
    if nullable and len(options) == 1:
        return _nullable(options[0])

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
            try:  # no item's path is spelt out unless an item is wrong (a PUSH has hundreds)
                return tuple([item(v, path) for v in value])
            except BadRequest:
                return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

        return var_tuple
    items = [_compile(a) for a in args]
    plain = _plain_items(args)

    def fixed_tuple(value: Any, path: str) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise _expect("a list", value, path)
        if len(items) != len(value):
            raise BadRequest(f"{path}: expected {len(items)} items, got {len(value)}")
        if plain is not None and plain(value):  # (partition, epoch) pairs, MAPPER_END_BATCH's ends
            return tuple(value)
        return tuple(conv(v, f"{path}[{i}]") for i, (conv, v) in enumerate(zip(items, value, strict=True)))

    return fixed_tuple


def _plain_items(args: tuple[Any, ...]) -> Callable[[Any], bool] | None:
    """For a fixed tuple of ints and strs only, one test that its items are exactly what
    ``_int`` and ``_str`` let through as they are (an ASCII str: no lone surrogate); else None."""
    if not args or not all(a is int or a is str for a in args):
        return None
    tests = [
        f"type(v[{i}]) is int" if a is int else f"type(v[{i}]) is str and v[{i}].isascii()"
        for i, a in enumerate(args)
    ]
    test: Callable[[Any], bool] = eval(f"lambda v: {' and '.join(tests)}")
    return test


def _compile_dict(tp: Any) -> Converter:
    """``dict[K, V]`` from a JSON object; int keys arrive as strings and are converted back."""
    key_t, val_t = typing.get_args(tp)
    key_conv, val_conv = _compile(key_t), _compile(val_t)

    def mapping(value: Any, path: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise _expect("an object", value, path)
        out = {}
        for k, v in value.items():
            key = k
            if key_t is int and isinstance(k, str) and _INT_KEY.fullmatch(k):
                key = int(k)
            out[key_conv(key, f"{path}.key")] = val_conv(v, f"{path}.{k}")
        return out

    return mapping
