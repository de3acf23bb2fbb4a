"""No function outside tests/ is longer than 60 lines, from ``def`` to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60
# tests may be long; the rest is not ours to measure (virtualenv, build output, caches)
SKIP = {"tests", ".venv", "build", ".git", ".mypy_cache", ".ruff_cache", "croupier.egg-info"}


def _sources() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not SKIP.intersection(path.relative_to(ROOT).parts[:-1])
    ]


def _too_long(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            # decorators are not counted: the function starts at its ``def``
            lines = node.end_lineno - node.lineno + 1
            if lines > LIMIT:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_walk_sees_the_sources() -> None:
    names = {str(p.relative_to(ROOT)) for p in _sources()}
    assert "core/codec.py" in names and "services/cli/__init__.py" in names
    assert not any(n.startswith(("tests/", ".venv/")) for n in names)


def test_no_function_is_longer_than_60_lines() -> None:
    too_long = [entry for path in _sources() for entry in _too_long(path)]
    assert not too_long, f"split these into named helpers (at most {LIMIT} lines each): {too_long}"
