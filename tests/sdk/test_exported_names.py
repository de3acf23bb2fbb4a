"""The public SDK names are pinned (DESIGN §12: extend freely, never rename)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import croupier
from croupier.core import errors

EXPECTED = [
    "App",
    "BadRequest",
    "Client",
    "ClientConfig",
    "Conflict",
    "CroupierError",
    "DataLostError",
    "InternalError",
    "NotCommitted",
    "NotEnoughWorkers",
    "QuotaExceeded",
    "Reader",
    "Shuffle",
    "Unauthorized",
    "UnknownApp",
    "UnknownShuffle",
    "Writer",
    "connect",
]


def test_all_is_pinned() -> None:
    assert croupier.__all__ == EXPECTED


def test_every_exported_name_resolves() -> None:
    for name in croupier.__all__:
        assert getattr(croupier, name) is not None, name
    assert croupier.DataLostError.code == "DATA_LOST"
    assert issubclass(croupier.DataLostError, croupier.CroupierError)
    assert set(EXPECTED) <= set(dir(croupier))


def _raised_names(doc: str) -> set[str]:
    """The names listed in a docstring's ``Raises`` section(s)."""
    names: set[str] = set()
    indent: int | None = None
    for line in doc.splitlines():
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if stripped.startswith("Raises"):
            indent = depth
        elif indent is not None and stripped and depth <= indent:
            indent = None
        elif indent is not None and (entry := re.match(r"([\w, ]+):", stripped)):
            names.update(n.strip() for n in entry.group(1).split(","))
    return names


def test_every_error_a_public_method_documents_is_exported() -> None:
    documented: set[str] = set()
    for name in croupier.__all__:
        obj = getattr(croupier, name)
        members = [obj, *(m for _, m in inspect.getmembers(obj, callable))] if inspect.isclass(obj) else [obj]
        for member in members:
            documented |= _raised_names(inspect.getdoc(member) or "")
    croupier_errors = {n for n in documented if isinstance(getattr(errors, n, None), type)}
    assert {"BadRequest", "NotEnoughWorkers", "UnknownShuffle", "InternalError"} <= croupier_errors
    assert croupier_errors <= set(croupier.__all__)
    for name in croupier_errors:
        assert issubclass(getattr(croupier, name), croupier.CroupierError)


def test_unknown_attribute_raises() -> None:
    try:
        _ = croupier.NoSuchThing
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_croupier_loads_no_zmq_or_blake3() -> None:
    code = "import sys, croupier; print(sorted(m for m in ('zmq', 'blake3') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
