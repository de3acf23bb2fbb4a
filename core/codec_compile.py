"""Per-class fast paths for ``croupier.core.codec``, compiled once from a class's field plan.

``from_json`` and ``to_json`` walk a class's fields through a list of converters, one call
and one f-string path per field: the master pays that on every command it decodes, every
event it logs and every reply it sends (issue 27: tens of thousands per second). The
functions made here do the same work as straight-line code, one per class:

- ``compile_decoder``: ``fast(data)`` builds the instance when ``data`` (a dict) holds every
  field and no other key, and each value passes its check; otherwise it returns ``None``
  and the caller takes the checked path, which raises the error with its path. It never
  raises an error of its own that the caller would pass on: the caller treats any
  ``BadRequest``, ``TypeError`` or ``ValueError`` from it as ``None``.
- ``compile_encoder``: ``encode(obj, seen)``, the object ``to_json`` makes, with the same
  keys in the same order (a signature covers the bytes).

Pure: no state but the code it makes. The property tests in ``tests/core/test_codec.py``
hold each to the generic path on arbitrary inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["compile_decoder", "compile_encoder"]

Fast = Callable[[dict[str, Any]], Any]
EncodeFn = Callable[[Any, dict[int, tuple[Any, Any]]], Any]


def compile_decoder(
    cls: type,
    fields: Sequence[tuple[str, Callable[[Any, str], Any], bool]],
    inline: Mapping[Callable[[Any, str], Any], str],
) -> Fast:
    """``fast(data)`` for ``cls``, whose init fields are ``fields`` (name, converter,
    required). ``inline`` maps a converter to the expression (of ``v``) that is true
    exactly when the converter accepts ``v`` and returns it unchanged; other converters
    are called."""
    env: dict[str, Any] = {"cls": cls}
    lines = ["def fast(data):", f"    if len(data) != {len(fields)}:", "        return None"]
    args = []
    for i, (name, convert, _required) in enumerate(fields):
        var = f"v{i}"
        lines.append(f"    {var} = data.get({name!r}, _MISSING)")
        lines.append(f"    if {var} is _MISSING:")
        lines.append("        return None")
        check = inline.get(convert)
        if check is not None:
            lines.append(f"    if not ({check.format(v=var)}):")
            lines.append("        return None")
        else:
            env[f"c{i}"] = convert
            lines.append(f"    {var} = c{i}({var}, {cls.__name__ + '.' + name!r})")
        args.append(f"{name}={var}")
    lines.append(f"    return cls({', '.join(args)})")
    env["_MISSING"] = _MISSING
    exec("\n".join(lines), env)  # code made here from field names (identifiers)
    fast: Fast = env["fast"]
    return fast


def compile_encoder(fields: Sequence[tuple[str, bool, bool]], encode_value: EncodeFn) -> EncodeFn:
    """``encode(obj, seen)`` for a dataclass whose fields are ``fields`` (name, whether its
    values are JSON scalars as they are, whether ``None`` is left out); ``encode_value``
    encodes a value that is not (``codec._encode``)."""
    env: dict[str, Any] = {"_encode": encode_value}
    lines = ["def encode(obj, seen):"]
    # the leading fields that are always written go in one dict display; the rest in order
    lead = 0
    while lead < len(fields) and not fields[lead][2]:
        lead += 1
    for name, plain, _omit in fields[:lead]:
        if not plain:
            lines.append(f"    f_{name} = obj.{name}")
    shown = ", ".join(
        f"{name!r}: obj.{name}"
        if plain
        else f"{name!r}: None if f_{name} is None else _encode(f_{name}, seen)"
        for name, plain, _omit in fields[:lead]
    )
    lines.append(f"    out = {{{shown}}}")
    for name, plain, omit in fields[lead:]:
        value = "v" if plain else "_encode(v, seen)"
        lines.append(f"    v = obj.{name}")
        if omit:
            lines.append("    if v is not None:")
            lines.append(f"        out[{name!r}] = {value}")
        else:
            lines.append(f"    out[{name!r}] = None if v is None else {value}")
    lines.append("    return out")
    exec("\n".join(lines), env)  # code made here from field names (identifiers)
    encode: EncodeFn = env["encode"]
    return encode


_MISSING = object()
