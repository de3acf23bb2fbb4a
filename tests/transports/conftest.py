"""Fixtures shared by the transport tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

_Ctx = zmq.Context[zmq.Socket[bytes]]


@pytest.fixture
def ctx() -> Iterator[_Ctx]:
    """A ZeroMQ context of the test's own, terminated after it (a leaked socket hangs here)."""
    context: _Ctx = zmq.Context()
    yield context
    context.term()
