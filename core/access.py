"""Who may send what (PROTOCOL §2.1): the access level of every message type.

Pure: a table and two small functions, no keys and no MACs (those are in
``croupier.transports.auth``).

- ``OPEN``: anyone. ``STATUS`` answers counts only unless member-signed; a repeated
  ``REGISTER_APP`` naming a registered app must be app- or member-signed (the master
  checks that, it needs the app table).
- ``APP``: signed with the app key of the body's ``app_id`` (scheme 2), or as a member.
- ``MEMBER``: signed with the member key (scheme 1): masters, workers, ``croupier admin``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from croupier.core.wire import MsgType

__all__ = ["ACCESS", "Access", "Scheme", "access_of", "allows", "public_status"]


class Access(IntEnum):
    OPEN = 0
    APP = 1
    MEMBER = 2


class Scheme(IntEnum):
    """The auth frame's scheme byte; ``NONE`` is a request without an auth frame."""

    NONE = 0
    MEMBER = 1
    APP = 2


ACCESS: dict[int, Access] = {
    MsgType.PING: Access.OPEN,
    MsgType.STATUS: Access.OPEN,
    MsgType.REGISTER_APP: Access.OPEN,
    MsgType.APP_HEARTBEAT: Access.APP,
    MsgType.UNREGISTER_APP: Access.APP,
    MsgType.REGISTER_SHUFFLE: Access.APP,
    MsgType.REVIVE_PARTITION: Access.APP,
    MsgType.MAPPER_END: Access.APP,
    MsgType.MAPPER_END_BATCH: Access.APP,
    MsgType.GET_LOCATIONS: Access.APP,
    MsgType.GET_LOCATIONS_BATCH: Access.APP,
    MsgType.UNREGISTER_SHUFFLE: Access.APP,
    MsgType.GET_SHUFFLE: Access.APP,
    MsgType.GET_LOST_MAPS: Access.APP,
    MsgType.RERUN_MAPS: Access.APP,
    MsgType.PUSH: Access.APP,
    MsgType.OPEN_STREAM: Access.APP,
    MsgType.FETCH_CHUNK: Access.APP,
    MsgType.FETCH_SMALL: Access.APP,
    MsgType.REPORT_COMMIT: Access.MEMBER,
    MsgType.REPORT_OFFLOAD: Access.MEMBER,
    MsgType.EXPIRE_APP: Access.MEMBER,
    MsgType.TAKE_OVER: Access.MEMBER,
    MsgType.COMMIT_FILES: Access.MEMBER,
    MsgType.DESTROY: Access.MEMBER,
    MsgType.RESERVE: Access.MEMBER,
    MsgType.REGISTER_WORKER: Access.MEMBER,
    MsgType.WORKER_HEARTBEAT: Access.MEMBER,
    MsgType.REPLICATE: Access.MEMBER,
    MsgType.LOSE_WORKER: Access.MEMBER,
    MsgType.EXCLUDE_WORKER: Access.MEMBER,
    MsgType.DECOMMISSION_WORKER: Access.MEMBER,
    MsgType.WORKER_INFO: Access.MEMBER,
}


def access_of(msg_type: int) -> Access:
    """The access level of ``msg_type``; a type not in the table is ``MEMBER`` (closed by default)."""
    return ACCESS.get(msg_type, Access.MEMBER)


def allows(msg_type: int, scheme: Scheme) -> bool:
    """Whether a request of ``msg_type`` with a valid signature of ``scheme`` may be served.

    An app signature (scheme 2) is only ever valid for the app named in the body; the
    verifier has checked that before asking.
    """
    level = access_of(msg_type)
    if level is Access.OPEN or scheme is Scheme.MEMBER:
        return True
    return level is Access.APP and scheme is Scheme.APP


# What an unsigned STATUS may see of the ``master`` object: how to reach and judge the
# master, nothing about apps, shuffles or workers.
_PUBLIC_MASTER_FIELDS = ("role", "url", "term", "leader", "followers", "writable", "in_grace")


def public_status(body: dict[str, Any]) -> dict[str, Any]:
    """The ``STATUS`` reply for a sender without member credentials: counts only, no ids.

    ``{"term", "leader", "seq", "counts": {"workers", "active_workers", "apps", "shuffles",
    "committed_shuffles"}, "master": {...}}`` (PROTOCOL §4, status reply).
    """
    workers = body.get("workers") or []
    shuffles = body.get("shuffles") or []
    master = body.get("master") or {}
    return {
        "term": body.get("term", 0),
        "leader": body.get("leader", ""),
        "seq": body.get("seq", 0),
        "counts": {
            "workers": len(workers),
            "active_workers": sum(1 for w in workers if w.get("status") == "active"),
            "apps": len(body.get("apps") or []),
            "shuffles": len(shuffles),
            "committed_shuffles": sum(1 for s in shuffles if s.get("committed")),
        },
        "master": {k: master[k] for k in _PUBLIC_MASTER_FIELDS if k in master},
    }
