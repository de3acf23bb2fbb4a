"""A stand-in for workers' control ports that acks every request at once.

Tests of the master register workers that do not run. Placing a shuffle on them sends
RESERVE to their control ports, and a port that never answers costs the master's 5 s
``RESERVE_TIMEOUT`` per placement. Registering them at this server's port instead keeps
what is tested (the master) and drops the wait. It answers ``ok`` to anything, and it is
not a worker: a test that needs a worker's behaviour starts one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from croupier.transports.rpc import RpcServer


@contextmanager
def acking_control_port() -> Iterator[int]:
    """The port of a server on 127.0.0.1 that acks every request, while the block runs."""
    with RpcServer("tcp://127.0.0.1:0", lambda _req, responder: responder.ok({}), name="acking") as server:
        yield int(server.url.rsplit(":", 1)[1])
