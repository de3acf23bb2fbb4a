"""The error tree. Every error Croupier raises or sends on the wire is one of these.

::

    CroupierError (code, retriable)
    ├── BadRequest            BAD_REQUEST          malformed frame, wrong shape, invalid id
    ├── NotLeader             NOT_LEADER      (r)  details: leader address, if known
    │   └── Fenced            NOT_LEADER      (r)  ha.zklog: deposed; a fenced write was refused
    ├── Congested             CONGESTED       (r)  back off and resend the same batch
    ├── HardSplit             HARD_SPLIT      (r)  nothing stored: revive the partitions, then resend
    ├── UnknownApp            UNKNOWN_APP
    ├── UnknownShuffle        UNKNOWN_SHUFFLE
    ├── UnknownWorker         UNKNOWN_WORKER  (r)  the worker should register again
    ├── StaleLocation         STALE_LOCATION       wrong worker incarnation or epoch
    ├── NotCommitted          NOT_COMMITTED   (r)  readers wait and ask again
    ├── NotEnoughWorkers      NOT_ENOUGH_WORKERS (r)
    ├── Conflict              CONFLICT             e.g. registering a shuffle twice with other sizes
    ├── QuotaExceeded         QUOTA_EXCEEDED       a configured cap is reached (``--max-apps``)
    ├── Unauthorized          UNAUTHORIZED         missing or wrong credentials (a tenant token, a signature)
    ├── DataLostError         DATA_LOST            names the partitions, (map, partition) pairs and workers
    ├── Unavailable           UNAVAILABLE     (r)  the event log (ZooKeeper, disk) cannot be written
    │   ├── LogLocked         UNAVAILABLE     (r)  ha.eventlog: another process holds the log
    │   └── ElectionNodeGone  UNAVAILABLE     (r)  ha.election: this contender's node is gone; join again
    ├── RequestTimeout        TIMEOUT         (r)  no reply in time
    ├── InternalError         INTERNAL             a bug: logged with a traceback on the server
    ├── InvalidEvent          INTERNAL             core.state: an event that does not fit the state
    ├── LogTruncated          INTERNAL             ha.eventlog: the records asked for were snapshotted
    └── LogCorrupted          INTERNAL             ha.eventlog: stored data failed validation

The classes outside this module (module named first) never travel on the wire
under a code of their own: they are sent as their code's class.
``tests/test_error_tree_doc.py`` keeps this drawing and the classes the same.

(r) = ``retriable``. Foreign errors (zmq, kazoo, OSError) are translated at the
boundary with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "Conflict",
    "Congested",
    "CroupierError",
    "DataLostError",
    "HardSplit",
    "InternalError",
    "NotCommitted",
    "NotEnoughWorkers",
    "NotLeader",
    "QuotaExceeded",
    "RequestTimeout",
    "StaleLocation",
    "Unauthorized",
    "Unavailable",
    "UnknownApp",
    "UnknownShuffle",
    "UnknownWorker",
    "error_from_wire",
]


class CroupierError(Exception):
    """Root of the tree.

    Parameters:
        message: a human-readable reason; it travels on the wire.
        details: JSON-compatible extras (for example the leader's address).
    """

    code: ClassVar[str] = "INTERNAL"
    status: ClassVar[int] = 16
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "", details: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        self.details: dict[str, Any] = dict(details or {})

    def to_wire(self) -> dict[str, Any]:
        """The JSON body of an error reply."""
        return {"code": self.code, "message": self.message, "details": self.details}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class BadRequest(CroupierError):
    code = "BAD_REQUEST"
    status = 1


class NotLeader(CroupierError):
    code = "NOT_LEADER"
    status = 2
    retriable = True

    @property
    def leader(self) -> str | None:
        """The leader's RPC URL, when the follower knows it."""
        value = self.details.get("leader")
        return value if isinstance(value, str) else None


class Congested(CroupierError):
    code = "CONGESTED"
    status = 3
    retriable = True


class HardSplit(CroupierError):
    """A worker refuses a PUSH whole (nothing of it stored): the named locations take no
    more data (the worker is decommissioning, their disk is past its reserve, or their disks
    failed or filled). Revive the partitions and resend there.
    ``details``: ``{"partitions": [[partition, epoch], ...], "reason": str}`` (from a split)."""

    code = "HARD_SPLIT"
    status = 4
    retriable = True


class UnknownShuffle(CroupierError):
    code = "UNKNOWN_SHUFFLE"
    status = 6


class UnknownApp(CroupierError):
    code = "UNKNOWN_APP"
    status = 7


class UnknownWorker(CroupierError):
    code = "UNKNOWN_WORKER"
    status = 8
    retriable = True


class DataLostError(CroupierError):
    """Data of some partitions is gone: no copy, nor all copies together, hold it.

    ``details`` holds ``partitions`` (list of int), ``maps`` (the ``[map_id,
    partition]`` pairs whose data is missing, when known; else empty) and
    ``workers`` (list of str); the message names them too.
    """

    code = "DATA_LOST"
    status = 9

    @classmethod
    def of(
        cls,
        partitions: list[int],
        workers: list[str],
        context: str = "",
        *,
        maps: list[list[int]] | None = None,
    ) -> DataLostError:
        """Build the error with a message that names partitions, maps and workers.

        Parameters:
            partitions: the partitions with data missing.
            workers: the workers that held (or should have held) it.
            context: what was being read, and why it failed; leads the message.
            maps: the ``[map_id, partition]`` pairs missing, when known.
        """
        parts = sorted(set(partitions))
        pairs = sorted({(int(m), int(p)) for m, p in maps or ()})
        names = sorted(set(workers))
        shown = ", ".join(map(str, parts[:50])) + (" ..." if len(parts) > 50 else "")
        prefix = f"{context}: " if context else ""
        which = ""
        if pairs:
            listed = ", ".join(f"({m}, {p})" for m, p in pairs[:20]) + (" ..." if len(pairs) > 20 else "")
            which = f" (map, partition) {listed}"
        return cls(
            f"{prefix}data lost for partitions [{shown}]{which} on workers {names}",
            {"partitions": parts, "maps": [[m, p] for m, p in pairs], "workers": names},
        )

    @property
    def partitions(self) -> list[int]:
        return [int(p) for p in self.details.get("partitions", [])]

    @property
    def maps(self) -> list[list[int]]:
        """The ``[map_id, partition]`` pairs whose data is missing (empty when not known)."""
        return [[int(m), int(p)] for m, p in self.details.get("maps", [])]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The ``(map_id, partition)`` pairs whose data is missing, as tuples (``maps`` as pairs)."""
        return [(m, p) for m, p in self.maps]

    @property
    def map_ids(self) -> list[int]:
        """The ids of the maps with data missing, sorted, once each: what ``Shuffle.rerun`` takes."""
        return sorted({m for m, _ in self.maps})

    @property
    def workers(self) -> list[str]:
        return [str(w) for w in self.details.get("workers", [])]


class StaleLocation(CroupierError):
    code = "STALE_LOCATION"
    status = 10


class RequestTimeout(CroupierError):
    code = "TIMEOUT"
    status = 11
    retriable = True


class Unavailable(CroupierError):
    code = "UNAVAILABLE"
    status = 12
    retriable = True


class NotEnoughWorkers(CroupierError):
    code = "NOT_ENOUGH_WORKERS"
    status = 13
    retriable = True


class Conflict(CroupierError):
    code = "CONFLICT"
    status = 14


class NotCommitted(CroupierError):
    code = "NOT_COMMITTED"
    status = 15
    retriable = True


class InternalError(CroupierError):
    code = "INTERNAL"
    status = 16


class QuotaExceeded(CroupierError):
    """A configured cap is reached (live apps: ``croupier master --max-apps``; a tenant's
    quotas, ``croupier.core.quotas``: then ``details`` holds ``tenant``, ``quota``, ``limit``
    and ``usage``).

    Not retriable: the same call keeps failing until something is released
    (an app unregistered or expired) or the operator raises the cap.
    """

    code = "QUOTA_EXCEEDED"
    status = 17


class Unauthorized(CroupierError):
    """Missing or wrong credentials: a tenant token, or a request signature (not signed,
    signed with the wrong key, replayed, or its clock is off).

    Not retriable: the same request with the same credentials keeps failing. Members
    sign with the cluster secret (``--secret-file``); apps with the key ``REGISTER_APP``
    returned. Servers say why a signature failed only in their log, never to the sender.
    """

    code = "UNAUTHORIZED"
    status = 18


_BY_CODE: dict[str, type[CroupierError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        NotLeader,
        Congested,
        HardSplit,
        UnknownShuffle,
        UnknownApp,
        UnknownWorker,
        DataLostError,
        StaleLocation,
        RequestTimeout,
        Unavailable,
        NotEnoughWorkers,
        Conflict,
        NotCommitted,
        InternalError,
        QuotaExceeded,
        Unauthorized,
    )
}
BY_STATUS: dict[int, type[CroupierError]] = {cls.status: cls for cls in _BY_CODE.values()}


def error_from_wire(status: int, body: Any) -> CroupierError:
    """Rebuild the error a server sent. Unknown codes become ``InternalError``."""
    cls = BY_STATUS.get(status, InternalError)
    if isinstance(body, dict):
        message = str(body.get("message", cls.code))
        details = body.get("details")
        code = body.get("code")
        if isinstance(code, str) and code in _BY_CODE:
            cls = _BY_CODE[code]
        return cls(message, details if isinstance(details, dict) else None)
    return cls(f"error status {status}")
