"""Every "DESIGN §N" the code cites is a section of docs/design.md with that number.

The code cites the design page by section number ("DESIGN §7.4" in a docstring); the page
lives in the repository (``docs/design.md``) and keeps the numbering, so each citation must
find its section: ``## N. ...`` for §N, and ``### N.M ...`` for §N.M.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs" / "design.md").read_text()
CITATION = re.compile(r"DESIGN §(\d+)(?:\.(\d+))?")
SKIP = {".venv", ".git", "build", "croupier.egg-info", ".mypy_cache", ".ruff_cache", "site"}
SUFFIXES = {".py", ".md", ".toml", ".java", ".sh", ".yml", ".yaml"}


def _citations() -> dict[str, list[str]]:
    """``"7.4"`` -> the files that cite it."""
    found: dict[str, list[str]] = {}
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".")]
        for name in files:
            path = Path(top, name)
            if path.suffix not in SUFFIXES:
                continue
            for major, minor in CITATION.findall(path.read_text(errors="replace")):
                key = f"{major}.{minor}" if minor else major
                found.setdefault(key, []).append(str(path.relative_to(ROOT)))
    return found


def _sections() -> set[str]:
    numbers = set(re.findall(r"^## (\d+)\. ", DESIGN, re.M))
    numbers |= set(re.findall(r"^### (\d+\.\d+) ", DESIGN, re.M))
    return numbers


def test_the_code_cites_the_design_page() -> None:
    cited = _citations()
    assert len(cited) >= 10, cited


def test_every_cited_section_exists() -> None:
    sections = _sections()
    missing = {n: files for n, files in _citations().items() if n not in sections}
    assert not missing, f"docs/design.md lacks the sections these files cite: {missing}"


def test_the_sections_are_numbered_in_order() -> None:
    majors = [int(n) for n in re.findall(r"^## (\d+)\. ", DESIGN, re.M)]
    assert majors == list(range(1, 13)), majors


def _may_import_column() -> dict[str, set[str] | None]:
    """§3's table: folder -> the folders its "may import" cell names (None: everything)."""
    section = DESIGN[DESIGN.index("## 3. ") : DESIGN.index("## 4. ")]
    table: dict[str, set[str] | None] = {}
    for folder, cell in re.findall(r"^\| `(\w+)/` \| [^|]* \|.*\| ([^|]*) \|$", section, re.M):
        text = cell.strip()
        if text == "everything":
            table[folder] = None
        elif text == "stdlib only":
            table[folder] = set()
        else:
            table[folder] = {name.strip() for name in text.split(",")}
    return table


def test_the_layout_test_enforces_the_design_pages_dependency_rule() -> None:
    from tests.test_layout import MAY_IMPORT

    column = _may_import_column()
    assert set(MAY_IMPORT) <= set(column), f"§3's table lacks {set(MAY_IMPORT) - set(column)}"
    differ = {f: (column[f], rule) for f, rule in MAY_IMPORT.items() if column[f] != rule}
    assert not differ, f"docs/design.md §3 and tests/test_layout.py's MAY_IMPORT differ: {differ}"
