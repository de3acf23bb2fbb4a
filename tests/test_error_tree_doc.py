"""The error tree drawn in ``core/errors.py``'s docstring is the real class tree.

Every subclass of ``CroupierError`` in the package (after importing every module)
must be drawn under its real parent, with its ``code`` and its ``(r)`` mark exactly
when it is ``retriable``; every drawn class must exist. Every drawn code is in
PROTOCOL.md's error-code table.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import croupier
from croupier.core import errors
from croupier.core.errors import CroupierError

PROTOCOL = (Path(__file__).resolve().parents[1] / "PROTOCOL.md").read_text()
_ROOT = "    CroupierError (code, retriable)"
# "    │   └── Fenced            NOT_LEADER      (r)  comment": the branch's column gives the depth
_BRANCH = re.compile(r"(?P<lead>[ │]*)[├└]── (?P<name>\w+)\s+(?P<code>[A-Z_]+)(?P<r>\s+\(r\))?(?:\s.*)?")


@dataclass(frozen=True)
class Drawn:
    code: str
    retriable: bool
    parent: str


def parse_tree(doc: str) -> dict[str, Drawn]:
    """Class name -> what the drawing says about it."""
    lines = doc.splitlines()
    start = lines.index(_ROOT)
    drawn: dict[str, Drawn] = {}
    parents = ["CroupierError"]  # parents[d] is the latest class drawn at depth d
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        m = _BRANCH.fullmatch(line[4:])
        assert m, f"cannot parse this line of the error tree: {line!r}"
        lead = m.group("lead")
        assert len(lead) % 4 == 0, f"misaligned branch: {line!r}"
        depth = len(lead) // 4 + 1
        assert depth <= len(parents), f"branch without a parent: {line!r}"
        name = m.group("name")
        assert name not in drawn, f"{name} is drawn twice"
        drawn[name] = Drawn(m.group("code"), m.group("r") is not None, parents[depth - 1])
        del parents[depth:]
        parents.append(name)
    return drawn


def real_tree() -> dict[str, Drawn]:
    """Every ``CroupierError`` subclass the package defines, wherever it lives."""
    for module in pkgutil.walk_packages(croupier.__path__, "croupier."):
        importlib.import_module(module.name)
    real: dict[str, Drawn] = {}
    todo = [CroupierError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("croupier."):
                assert sub.__name__ not in real, f"two error classes are named {sub.__name__}"
                real[sub.__name__] = Drawn(sub.code, sub.retriable, cls.__name__)
                todo.append(sub)
    return real


DRAWN = parse_tree(errors.__doc__ or "")


def test_the_drawing_is_the_class_tree() -> None:
    real = real_tree()
    assert sorted(set(real) - set(DRAWN)) == [], "error classes missing from the drawing"
    assert sorted(set(DRAWN) - set(real)) == [], "drawn error classes that do not exist"
    for name, drawn in DRAWN.items():
        assert drawn == real[name], f"{name}: drawn as {drawn}, is {real[name]}"


@pytest.mark.parametrize("code", sorted({d.code for d in DRAWN.values()}))
def test_every_drawn_code_is_in_the_protocol_error_table(code: str) -> None:
    assert re.search(rf"^\| \d+ \| `{code}` \|", PROTOCOL, re.M), f"PROTOCOL.md's error table lacks {code}"


def test_the_parser_sees_what_a_wrong_drawing_gets_wrong() -> None:
    # the comparison above is only as good as the parser: a changed mark, parent or line shows
    doc = errors.__doc__ or ""
    fenced = "    │   └── Fenced            NOT_LEADER      (r)"
    assert fenced in doc
    moved = parse_tree(doc.replace(fenced, "    ├── Fenced            NOT_LEADER      (r)"))
    assert moved["Fenced"].parent == "CroupierError"
    unmarked = parse_tree(doc.replace(fenced, "    │   └── Fenced            NOT_LEADER     "))
    assert not unmarked["Fenced"].retriable
    assert "Conflict" not in parse_tree("\n".join(x for x in doc.splitlines() if "── Conflict " not in x))
