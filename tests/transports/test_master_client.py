"""``MasterClient`` never holds its lock while a request is in flight or while it sleeps between
tries (issue 24): ``close`` from another thread does not wait for a call's retries, and the
call ends with ``Unavailable``."""

from __future__ import annotations

import threading

from croupier.core.commands import Ping
from croupier.core.errors import CroupierError, Unavailable
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import Request, Responder, RpcServer


def test_close_does_not_wait_for_a_call_that_keeps_retrying() -> None:
    asked = threading.Event()

    def never_answer(request: Request, responder: Responder) -> None:
        asked.set()  # no reply: the caller times out, and retries until its deadline

    with RpcServer("tcp://127.0.0.1:0", never_answer, name="silent") as server:
        master = MasterClient(server.url, timeout=0.2, attempts=1, deadline=120.0, backoff=0.2)
        errors: list[CroupierError] = []

        def call() -> None:
            try:
                master.call(Ping())
            except CroupierError as exc:
                errors.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        assert asked.wait(30)
        closer = threading.Thread(target=master.close)
        closer.start()
        # the old client held its lock for the whole 120 s of retries: close waited for all of them
        closer.join(30)
        caller.join(30)
        assert not closer.is_alive(), "close() waited for another thread's retries"
        assert not caller.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], Unavailable)
    assert "closed" in errors[0].message


def test_a_zk_url_asks_the_lookup_it_is_given() -> None:
    with RpcServer("tcp://127.0.0.1:0", lambda req, resp: resp.ok({}), name="leader") as server:
        asked: list[tuple[str, float]] = []

        class Lookup:
            def __init__(self, url: str, timeout: float) -> None:
                asked.append((url, timeout))
                self.closed = False

            def __call__(self) -> str:
                return server.url

            def close(self) -> None:
                self.closed = True

        with MasterClient("zk://127.0.0.1:1/croupier", timeout=10.0, leader_lookup=Lookup) as master:
            assert master.call(Ping()) == {}
        assert asked == [("zk://127.0.0.1:1/croupier", 5.0)]
