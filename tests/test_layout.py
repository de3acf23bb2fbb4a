"""The package layout: every folder with an __init__.py is mapped in pyproject, and each folder imports
only the folders DESIGN §3's table allows."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import croupier

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "sdk": "croupier",
    "core": "croupier.core",
    "actors": "croupier.actors",
    "ha": "croupier.ha",
    "transports": "croupier.transports",
    "storage": "croupier.storage",
    "services": "croupier.services",
    "tools": "croupier.tools",
    "dataplane": "croupier.dataplane",
    "ops": "croupier.ops",
}
# packages that hold data only (no __init__.py): the JVM client's Java sources (DESIGN §3)
DATA_PACKAGES = {"croupier.spark.jvm": "clients/jvm"}


def _pyproject() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]  # type: ignore[index]
    packages = set(setuptools["packages"])
    package_dir = setuptools["package-dir"]
    expected = set()
    for top, name in FOLDERS.items():
        assert package_dir[name] == top
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            expected.add(".".join([name, *rel.parts]))
    for name, folder in DATA_PACKAGES.items():
        assert package_dir[name] == folder
        assert (ROOT / folder).is_dir(), f"{folder} is missing"
        expected.add(name)
    missing = expected - packages
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert packages <= expected, f"listed but without __init__.py: {sorted(packages - expected)}"


def test_there_is_no_top_level_croupier_folder() -> None:
    # it would shadow the installed package when running from the repo root
    assert not (ROOT / "croupier").exists()


def test_core_imports_only_the_standard_library_and_itself() -> None:
    import sys

    allowed = set(sys.stdlib_module_names) | {"croupier"}
    for path in (ROOT / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in allowed, f"{path.name} imports {name}: core/ is stdlib only"
                if top == "croupier":
                    assert name.startswith("croupier.core"), (
                        f"{path.name} imports {name}: core/ imports only core"
                    )


def test_import_croupier_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, croupier.core.ids; print(sorted(m for m in ('zmq','pykka','kazoo') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert croupier.__version__


def test_nothing_below_services_imports_tools() -> None:
    # tools/ (demo, bench, ceiling) sit on top of the service; the layers it measures never see it
    for top in ("core", "transports", "storage", "ha", "actors", "dataplane"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                for name in names:
                    assert not name.startswith("croupier.tools"), f"{top}/{path.name} imports {name}"


def test_only_services_import_ops() -> None:
    # metrics, HTTP and the status page are wired in by the services; the layers they
    # observe never see them (their hooks are plain callables and wrappers)
    for top in ("core", "transports", "storage", "ha", "actors", "dataplane", "sdk"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                for name in names:
                    assert not name.startswith("croupier.ops"), f"{top}/{path.name} imports {name}"


# DESIGN §3's table: the folders each folder may import (besides itself). None = everything.
MAY_IMPORT: dict[str, set[str] | None] = {
    "sdk": {"core", "transports"},
    "core": set(),
    "actors": {"core", "storage", "transports", "ha"},
    "ha": {"core"},
    "transports": {"core"},
    "storage": {"core"},
    "services": None,
    "dataplane": {"core", "storage", "transports", "actors"},
    "ops": {"core", "transports"},
    "tools": None,
}


def _folder_of(module: str) -> str | None:
    """The folder a ``croupier...`` module lives in (``croupier`` itself and its own modules: sdk)."""
    parts = module.split(".")
    if parts[0] != "croupier":
        return None
    if len(parts) > 1 and parts[1] in FOLDERS and parts[1] != "sdk":
        return parts[1]
    return "sdk"


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, with its line (``TYPE_CHECKING`` and lazy imports too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_the_table_names_every_folder() -> None:
    assert set(MAY_IMPORT) == set(FOLDERS)


def test_each_folder_imports_only_what_the_design_allows() -> None:
    wrong = []
    for top, allowed in MAY_IMPORT.items():
        if allowed is None:
            continue
        for path in (ROOT / top).rglob("*.py"):
            for line, module in _imported_modules(path):
                folder = _folder_of(module)
                if folder is not None and folder != top and folder not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({top}/ -> {folder}/)")
    assert not wrong, f"DESIGN §3: {sorted(MAY_IMPORT.items(), key=str)}; these break it: {wrong}"
