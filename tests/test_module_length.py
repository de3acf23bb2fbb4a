"""No module outside the tests is longer than 700 lines (issue 24): one job each, readable in one sitting."""

from __future__ import annotations

from pathlib import Path

from tests.test_function_length import ROOT, _sources

LIMIT = 700
# the test suites may be long; what they test may not
TESTS = ("tests", "integration")


def _modules() -> list[Path]:
    return [path for path in _sources() if path.relative_to(ROOT).parts[0] not in TESTS]


def test_the_walk_sees_the_modules() -> None:
    names = {str(p.relative_to(ROOT)) for p in _modules()}
    assert "storage/disk.py" in names and "services/cli/__init__.py" in names
    assert not any(n.startswith(TESTS) for n in names)


def test_no_module_is_longer_than_700_lines() -> None:
    too_long = []
    for path in _modules():
        with open(path, encoding="utf-8") as fh:
            lines = sum(1 for _ in fh)
        if lines > LIMIT:
            too_long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not too_long, f"split these by job (at most {LIMIT} lines each): {too_long}"
