"""core.access: every message type has an access level, and the levels say who may send it."""

from __future__ import annotations

from croupier.core.access import ACCESS, Access, Scheme, access_of, allows
from croupier.core.wire import MsgType


def test_every_message_type_has_an_access_level() -> None:
    assert set(ACCESS) == {int(t) for t in MsgType}


def test_the_levels_of_the_contract() -> None:
    member = {"REPORT_COMMIT", "EXPIRE_APP", "TAKE_OVER", "COMMIT_FILES", "DESTROY", "RESERVE"}
    member |= {"REGISTER_WORKER", "WORKER_HEARTBEAT", "REPLICATE", "LOSE_WORKER", "EXCLUDE_WORKER"}
    member |= {"DECOMMISSION_WORKER", "WORKER_INFO", "REPORT_OFFLOAD"}
    opened = {"PING", "STATUS", "REGISTER_APP"}
    for t in MsgType:
        want = Access.MEMBER if t.name in member else Access.OPEN if t.name in opened else Access.APP
        assert access_of(t) is want, t.name


def test_unknown_types_are_closed() -> None:
    assert access_of(9999) is Access.MEMBER
    assert not allows(9999, Scheme.APP)


def test_who_may_send_what() -> None:
    assert allows(MsgType.STATUS, Scheme.NONE)
    assert not allows(MsgType.PUSH, Scheme.NONE)
    assert allows(MsgType.PUSH, Scheme.APP)
    assert allows(MsgType.PUSH, Scheme.MEMBER)
    assert not allows(MsgType.DESTROY, Scheme.APP)
    assert allows(MsgType.DESTROY, Scheme.MEMBER)
