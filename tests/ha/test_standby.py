"""``HotStandby``: a member's start-up load fails fast on a log that cannot be replayed, and a
follower whose fold meets such a record says so (once) instead of deferring it silently.

A ``MemoryEventLog`` stands in for the read-only ZooKeeper view (the fold reads the same
interface); the ZooKeeper path itself is ``integration/test_ha_master_startup.py``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from croupier.ha.eventlog import LogCorrupted, MemoryEventLog
from croupier.ha.standby import HotStandby

BAD = json.dumps({"e": "NoSuchKind", "v": 1}).encode()


def standby(log: MemoryEventLog, **kw: Any) -> HotStandby:
    return HotStandby(log, **kw)  # type: ignore[arg-type]


def test_load_raises_on_a_record_that_cannot_be_replayed() -> None:
    log = MemoryEventLog()
    log.append([BAD])
    member = standby(log, load=False)
    with pytest.raises(LogCorrupted, match="record 1 passed its checksum but cannot be replayed"):
        member.load()
    member.close()


def test_a_fold_that_cannot_go_on_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    log = MemoryEventLog()
    member = standby(log)
    log.append([BAD])
    with caplog.at_level(logging.ERROR, logger="croupier.ha.standby"):
        member.refold()
        member.refold()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "cannot fold the log" in errors[0].getMessage()
    assert member.status({})["master"]["seq"] == 0
    member.close()
