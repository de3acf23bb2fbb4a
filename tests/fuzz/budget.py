"""How many inputs each fuzz target runs, and a tally of the inputs actually run.

CI runs every target with a small ``max_examples``. A long run sets
``CROUPIER_FUZZ_EXAMPLES=N``: each decoder target then runs ``N`` inputs (targets
that touch files run ``N // 10``), with no example database and a 5 s deadline
per input (30 s in a long run, which shares the machine), so that an input that
hangs fails the run. ``CROUPIER_FUZZ_REPORT=path``
writes the tally (inputs per target) as JSON at the end of the session. A long run
needs ``--timeout=0`` (pytest-timeout's 180 s per test would cut it; the per-input
deadline still catches a hang)::

    CROUPIER_FUZZ_EXAMPLES=140000 CROUPIER_FUZZ_REPORT=fuzz.json .venv/bin/python -m pytest \
        -p no:randomly --timeout=0 tests/fuzz/test_decoders.py tests/fuzz/test_filelog_fuzz.py
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

__all__ = ["LONG_RUN", "TALLY", "fuzz_settings", "ran"]

F = TypeVar("F", bound=Callable[..., Any])

LONG_RUN = int(os.environ.get("CROUPIER_FUZZ_EXAMPLES", "0"))
TALLY: Counter[str] = Counter()
_CI_EXAMPLES = 200


def fuzz_settings(*, files: bool = False) -> Callable[[F], F]:
    """The settings of one fuzz target: CI-sized, or long-run-sized when the env var is set."""
    examples = LONG_RUN if LONG_RUN else _CI_EXAMPLES
    if files:
        examples = max(20, examples // 10)
    checks = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    if LONG_RUN:
        return settings(
            max_examples=examples, deadline=timedelta(seconds=30), database=None, suppress_health_check=checks
        )
    return settings(max_examples=examples, deadline=timedelta(seconds=5), suppress_health_check=checks)


def ran(target: str) -> None:
    """Count one input run against ``target``."""
    TALLY[target] += 1
