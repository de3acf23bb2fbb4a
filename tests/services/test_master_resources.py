"""Issue 13, the master's resources: the cap on live apps, an app actor (a thread) that cannot
start, a log that cannot be replayed, and a data directory that filled up once."""

from __future__ import annotations

import errno
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest

from croupier.actors.app_actor import AppActor
from croupier.core import commands as c
from croupier.core.config import MasterConfig
from croupier.core.errors import QuotaExceeded, Unavailable
from croupier.ha.eventlog import LogCorrupted
from croupier.ha.filelog import FileEventLog
from croupier.services.master import MasterService
from croupier.transports.master_client import MasterClient


def config(**kw: Any) -> MasterConfig:
    return MasterConfig(sweep_interval=0, takeover_grace=0, **kw)


def master(data: Path, **kw: Any) -> MasterService:
    """A master over ``data``, not started (``with`` starts it)."""
    return MasterService("tcp://127.0.0.1:0", data, config=config(**kw), rng=random.Random(1))


@pytest.fixture
def no_thread_for_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``AppActor`` threads fail to start while the list holds a count > 0 (as under a pids limit)."""
    budget = [0]
    real_start = threading.Thread.start

    def start_thread(thread: threading.Thread) -> None:
        if thread.name.startswith("AppActor") and budget[0] > 0:
            budget[0] -= 1
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_thread)
    yield budget


def app_actors() -> int:
    return len(pykka.ActorRegistry.get_by_class(AppActor))


def test_live_apps_are_capped(tmp_path: Path) -> None:
    with master(tmp_path / "m", max_apps=2) as m, MasterClient(m.url, attempts=1) as client:
        first = client.call(c.RegisterApp("a", "a-1"))["app_id"]
        client.call(c.RegisterApp("b"))
        with pytest.raises(QuotaExceeded, match="--max-apps 2") as caught:
            client.call(c.RegisterApp("c"))
        assert caught.value.code == "QUOTA_EXCEEDED" and not caught.value.retriable
        assert client.call(c.RegisterApp("a", "a-1"))["app_id"] == first  # a retry still answers
        client.call(c.UnregisterApp(first))
        client.call(c.RegisterApp("c"))
        assert app_actors() == 2


def test_an_app_actor_that_cannot_start_fails_only_its_registration(
    tmp_path: Path, no_thread_for_app: list[int]
) -> None:
    """Regression: "can't start new thread" ended the master actor; the master never answered again."""
    with master(tmp_path / "m") as m, MasterClient(m.url, attempts=1) as client:
        client.call(c.RegisterApp("before"))
        no_thread_for_app[0] = 1
        with pytest.raises(Unavailable, match="cannot start the actor") as caught:
            client.call(c.RegisterApp("refused", "refused-1"))
        assert caught.value.retriable
        assert client.call(c.Ping())["pong"] is True
        status = client.call(c.Status())
        assert [a["name"] for a in status["apps"]] == ["before"]  # nothing was logged for it
        assert client.call(c.RegisterApp("refused", "refused-1"))["app_id"] == "refused-1"
        assert app_actors() == 2
    assert app_actors() == 0


def test_a_restart_that_cannot_start_every_app_actor_stops_with_the_reason(
    tmp_path: Path, no_thread_for_app: list[int]
) -> None:
    with master(tmp_path / "m") as m, MasterClient(m.url, attempts=1) as client:
        for name in ("a", "b", "c"):
            client.call(c.RegisterApp(name))
    no_thread_for_app[0] = 1
    began = time.monotonic()
    with pytest.raises(Unavailable, match="cannot start the actor"):
        master(tmp_path / "m").start()
    assert time.monotonic() - began < 10
    assert app_actors() == 0
    with master(tmp_path / "m") as m:  # once threads can start again it serves
        assert m.describe().seq == 3
        assert app_actors() == 3


@pytest.mark.parametrize(
    "event",
    [
        {"e": "NoSuchKind", "v": 1},
        {"e": "AppUnregistered", "v": 1, "app_id": "never-registered"},
    ],
    ids=["unknown kind", "rejected by the fold"],
)
def test_a_log_that_cannot_be_replayed_stops_the_start(tmp_path: Path, event: dict[str, Any]) -> None:
    """Regression: the master started (its actor dead) and served nothing."""
    with FileEventLog(tmp_path / "m") as log:
        log.append([json.dumps(event).encode()])
    with pytest.raises(LogCorrupted, match="record 1 passed its checksum but cannot be replayed"):
        master(tmp_path / "m").start()
    assert app_actors() == 0


def test_a_full_disk_is_not_forever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: after ENOSPC every write was refused until a restart, even once space was back."""
    with master(tmp_path / "m") as m, MasterClient(m.url, attempts=1) as client:
        client.call(c.RegisterApp("before"))

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", full)
        with pytest.raises(Unavailable, match="No space left"):
            client.call(c.RegisterApp("lost", "lost-1"))
        monkeypatch.undo()
        deadline = time.monotonic() + 10
        while True:  # the actor reloads from the log before it accepts writes again
            try:
                client.call(c.RegisterApp("after"))
                break
            except Unavailable:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        names = sorted(a["name"] for a in client.call(c.Status())["apps"])
        assert names == ["after", "before"]  # the refused registration is not served
    with master(tmp_path / "m") as m, MasterClient(m.url, attempts=1) as client:
        assert sorted(a["name"] for a in client.call(c.Status())["apps"]) == ["after", "before"]


def test_croupier_master_runs_with_the_master_gil_switch_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 27: at CPython's 5 ms, forced GIL hand-overs between the master's threads cost ~30 %
    # of its CPU under the control bench; the process `croupier master` runs sets a longer one
    import sys

    from croupier.services._lifecycle import MASTER_SWITCH_INTERVAL
    from croupier.services.cli import build_parser
    from croupier.services.cli import master as cli_master

    seen: list[float] = []

    def serve(*_args: object) -> int:
        seen.append(sys.getswitchinterval())
        return 0

    monkeypatch.setattr(cli_master, "_serve_master", serve)
    previous = sys.getswitchinterval()
    try:
        args = build_parser().parse_args(["master", "--listen", "127.0.0.1:0"])
        assert args.func(args) == 0
    finally:
        sys.setswitchinterval(previous)
    assert seen == [pytest.approx(MASTER_SWITCH_INTERVAL)]
    assert MASTER_SWITCH_INTERVAL > 0.005
