"""The documentation site builds with ``mkdocs build --strict`` (no warning: every link and
page resolves), and its generated reference covers every command, flag, setting and metric
the code has. The site is built once, into a temporary directory, never into the repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from croupier.core.config import ClientConfig, MasterConfig, WorkerConfig
from croupier.ops.metrics import MasterMetrics, WorkerGauges, WorkerMetrics, exposition
from croupier.ops.openapi import PATHS
from croupier.services.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
# the README is the front door: what it is, the two commands, a quick start, links
README_LIMIT = 20 * 1024


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, log
    yield out


def _text(site: Path, page: str) -> str:
    return html.unescape((site / page / "index.html").read_text())


def _sections(page: str) -> dict[str, str]:
    """``<h2 id="...">`` -> the HTML up to the next ``<h2``."""
    parts = re.split(r'<h2 id="([^"]+)"', page)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("croupier has no sub-commands")


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in ("", "guides/quickstart", "guides/spark", "design", "protocol", "benchmarks", "changelog"):
        assert (site / page / "index.html").is_file(), page
    assert "Material for MkDocs" in (site / "index.html").read_text()


def test_the_protocol_page_is_protocol_md_unchanged(site: Path) -> None:
    page = _text(site, "protocol")
    for heading in re.findall(r"^## (.+)$", (ROOT / "PROTOCOL.md").read_text(), re.M):
        assert heading.replace("`", "") in re.sub(r"<[^>]+>", "", page), heading


def test_the_cli_reference_has_every_command_and_flag(site: Path) -> None:
    sections = _sections(_text(site, "reference/cli"))
    for command, parser in _commands(build_parser()).items():
        slug = f"croupier-{command}"
        assert slug in sections, f"the CLI reference lacks croupier {command}"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            longs = [o for o in action.option_strings if o.startswith("--")]
            name = longs[0] if longs else action.dest
            assert f"<code>{name}</code>" in sections[slug], f"croupier {command} {name} is not documented"


def test_the_settings_reference_has_every_field(site: Path) -> None:
    sections = _sections(_text(site, "reference/settings"))
    for cls in (MasterConfig, WorkerConfig, ClientConfig):
        section = sections[cls.__name__.lower()]
        for f in dataclasses.fields(cls):
            assert f"<code>{f.name}</code>" in section, f"{cls.__name__}.{f.name} is not documented"


def _exposed(registry_dir: Path) -> set[str]:
    worker = WorkerMetrics()
    worker.collect(
        WorkerGauges(
            memory=lambda: (0, 1, 0, 0, 0),
            locations=lambda: 0,
            flush=lambda: [(0, 0.0, 0)],
            dirs=[registry_dir],
            connections=lambda: {"push": 0},
            throttled=lambda: {},
            load=lambda: {"disk_util": 0.0, "io_wait": 0.0},
        )
    )
    master = MasterMetrics()
    master.collect(
        # with "offload": a master run with --object-store
        lambda: {
            **{"term": 1, "seq": 1, "master": {"role": "leader"}, "workers": [], "apps": [], "shuffles": []},
            "offload": {},
            "object_janitor": {},
        }
    )
    names = set()
    for registry in (worker.registry, master.registry):
        for line in exposition(registry).decode().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                if name.endswith("_created"):  # prometheus_client's creation time of a counter or histogram
                    continue
                counter = kind == "counter" and not name.endswith("_total")
                names.add(name + "_total" if counter else name)
    return names


def test_the_metrics_reference_has_every_metric(site: Path, tmp_path: Path) -> None:
    page = _text(site, "reference/metrics")
    names = _exposed(tmp_path)
    assert len(names) >= 40
    for name in names:
        assert f"<code>{name}</code>" in page, f"metric {name} is not documented"


def test_the_http_reference_has_every_path(site: Path) -> None:
    page = _text(site, "reference/http")
    assert PATHS
    for path in PATHS:
        assert f"<code>{path}</code>" in page, f"HTTP path {path} is not documented"


def test_metrics_named_in_the_guides_exist(tmp_path: Path) -> None:
    names = _exposed(tmp_path)
    suffixes = ("", "_bucket", "_sum", "_count")
    for page in (ROOT / "docs" / "guides").glob("*.md"):
        for name in re.findall(r"\bcroupier_(?:worker|master)_[a-z_]+", page.read_text()):
            assert any(name.removesuffix(s) in names for s in suffixes if name.endswith(s)), (
                f"{page.name} names {name}, which no registry has"
            )


def test_the_readme_is_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes: move sections to docs/guides/"


def test_the_docs_pages_the_code_points_to_exist() -> None:
    """Docstrings and help texts cite guides by path (``docs/guides/security.md``)."""
    cited: set[str] = set()
    for top in (
        "core",
        "sdk",
        "actors",
        "ha",
        "transports",
        "storage",
        "services",
        "dataplane",
        "ops",
        "tools",
    ):
        for path in (ROOT / top).rglob("*.py"):
            cited |= set(re.findall(r"\bdocs/[\w/.-]+\.(?:md|png)\b", path.read_text()))
    assert cited, "no docstring points to docs/ any more: drop this test"
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"the code points to docs pages that do not exist: {missing}"
