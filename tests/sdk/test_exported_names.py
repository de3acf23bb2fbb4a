"""The public SDK names are pinned (DESIGN §12: extend freely, never rename)."""

from __future__ import annotations

import subprocess
import sys

import croupier

EXPECTED = [
    "App",
    "Client",
    "ClientConfig",
    "CroupierError",
    "DataLostError",
    "Reader",
    "Shuffle",
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
