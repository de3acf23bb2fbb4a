"""Writes the fuzz tally (``budget.TALLY``) to ``$CROUPIER_FUZZ_REPORT`` when the session ends."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.fuzz.budget import TALLY


@pytest.fixture(scope="session", autouse=True)
def fuzz_report() -> Iterator[None]:
    yield
    path = os.environ.get("CROUPIER_FUZZ_REPORT")
    if path:
        with open(path, "w") as fh:
            json.dump({"total": sum(TALLY.values()), "per_target": dict(sorted(TALLY.items()))}, fh, indent=1)
