"""ops.logs.held_logs: start-up log lines wait until the URL line is out (issue 22 §3.12)."""

from __future__ import annotations

import io
import logging

from croupier.ops.logs import held_logs


def _root_to(stream: io.StringIO) -> tuple[logging.Logger, list[logging.Handler], logging.Handler]:
    root = logging.getLogger()
    saved = list(root.handlers)
    for h in saved:
        root.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    return root, saved, handler


def _restore(root: logging.Logger, saved: list[logging.Handler], handler: logging.Handler) -> None:
    root.removeHandler(handler)
    for h in saved:
        root.addHandler(h)


def test_records_wait_for_the_release_then_come_in_order() -> None:
    out = io.StringIO()
    root, saved, handler = _root_to(out)
    log = logging.getLogger("croupier.test.held")
    try:
        with held_logs() as printed:
            log.warning("one")
            log.warning("two")
            assert out.getvalue() == ""
            out.write("URL\n")
            printed()
            log.warning("three")
        assert out.getvalue() == "URL\none\ntwo\nthree\n"
        assert root.handlers == [handler]
    finally:
        _restore(root, saved, handler)


def test_an_error_lets_them_go_and_a_long_wait_does_too() -> None:
    out = io.StringIO()
    root, saved, handler = _root_to(out)
    log = logging.getLogger("croupier.test.held")
    try:
        try:
            with held_logs():
                log.warning("before the failure")
                raise RuntimeError("start-up failed")
        except RuntimeError:
            pass
        assert out.getvalue() == "before the failure\n"
        with held_logs(limit=2) as printed:
            for i in range(3):
                log.warning("retry %d", i)
            assert out.getvalue().endswith("retry 0\nretry 1\nretry 2\n")  # past the limit: all go
            printed()
        with held_logs(max_hold=0.0):
            log.warning("at once")
            assert out.getvalue().endswith("at once\n")
        assert root.handlers == [handler]
    finally:
        _restore(root, saved, handler)
