"""ruff and mypy --strict are part of the test command, so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def test_ruff_is_clean() -> None:
    out = subprocess.run(
        [_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "targets",
    [[], ["tests", "integration", "conftest.py"]],
    ids=["package", "tests"],  # the tests and integration suites are checked as strictly
)
def test_mypy_strict_is_clean(targets: list[str]) -> None:
    out = subprocess.run([_tool("mypy"), *targets], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
