"""MkDocs hook (``mkdocs.yml``: ``hooks``): the pages that are not written in ``docs/``.

- ``reference/cli.md``, ``reference/settings.md``, ``reference/metrics.md``,
  ``reference/http.md`` are generated
  from the code by ``croupier.tools.docs_reference`` at every build;
- ``protocol.md``, ``benchmarks.md``, ``reliability.md`` and ``changelog.md`` are the
  repository's root files (PROTOCOL.md is pinned byte for byte by tests, and other work
  adds results to BENCHMARKS.md and RELIABILITY.md, so they stay where they are), included
  as they are, with their links to other root files pointed at the site's pages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from croupier.tools import docs_reference

ROOT = Path(__file__).resolve().parents[1]

GENERATED = {
    "reference/cli.md": docs_reference.cli_reference,
    "reference/settings.md": docs_reference.config_reference,
    "reference/metrics.md": docs_reference.metrics_reference,
    "reference/http.md": docs_reference.http_reference,
}
ROOT_FILES = {
    "PROTOCOL.md": "protocol.md",
    "BENCHMARKS.md": "benchmarks.md",
    "RELIABILITY.md": "reliability.md",
    "CHANGELOG.md": "changelog.md",
    "README.md": "index.md",
}
_LINK = re.compile(r"\]\((?P<target>[A-Z]+\.md)(?P<anchor>#[^)]*)?\)")


def _relinked(text: str) -> str:
    """Links between root files (``[x](PROTOCOL.md#2-header)``) to their pages on the site."""

    def page(m: re.Match[str]) -> str:
        target = ROOT_FILES.get(m.group("target"), m.group("target"))
        return f"]({target}{m.group('anchor') or ''})"

    return _LINK.sub(page, text)


def on_files(files: Files, config: Any) -> Files:
    for uri, render in GENERATED.items():
        files.append(File.generated(config, uri, content=render()))
    for name, uri in ROOT_FILES.items():
        if uri != "index.md":
            text = (ROOT / name).read_text()
            files.append(File.generated(config, uri, content=_relinked(text)))
    return files
