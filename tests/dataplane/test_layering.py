"""DESIGN §3: ``dataplane/`` builds on core, storage, transports and actors, never on services."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = (
    "croupier.core",
    "croupier.storage",
    "croupier.transports",
    "croupier.actors",
    "croupier.dataplane",
)


def test_dataplane_imports_only_the_layers_below_it() -> None:
    checked = 0
    for path in (ROOT / "dataplane").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                checked += 1
                if name == "croupier" or name.startswith("croupier."):
                    assert name.startswith(ALLOWED), f"{path.name} imports {name}"
    assert checked > 0
