"""Signed requests (PROTOCOL §2.1): the 48-byte auth frame, who signs, who checks.

A request with header ``flags`` bit 0 (``AUTH_FLAG``) carries an auth frame right after
its body (frame 2); its payloads start at frame 3. The frame, little-endian::

    offset size field
    0      1    scheme  1 = member (member key), 2 = app (app key of body["app_id"])
    1      7    zero
    8      8    nonce   u64: the client's clock in microseconds since the epoch,
                        strictly increasing in each client process
    16     32   mac     blake3 keyed by the scheme's key, over
                        header (20 bytes) ‖ auth[0:16] ‖ u32 len(body) ‖ body ‖ payload 0 (if any)

Only the first payload is covered: on PUSH and REPLICATE it holds every batch header,
whose digests are keyed by the app key (§5.1), so the MAC and the digests together
cover every byte at the cost of hashing the headers once.

A :class:`Signer` chooses the key of each request (clients); a :class:`Verifier`
checks them (servers, before dispatch): a MAC under the right key, a nonce within
±300 s of the server's clock and not seen before for that identity, and the access
level of the message type (:mod:`croupier.core.access`).
"""

from __future__ import annotations

import heapq
import hmac
import itertools
import logging
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3

from croupier.core.access import Access, Scheme, access_of, allows
from croupier.core.errors import CroupierError, Unauthorized
from croupier.core.wire import HEADER_SIZE, Kind, encode_header
from croupier.transports.secret import ClusterSecret

__all__ = [
    "AUTH_FLAG",
    "AUTH_FRAME_SIZE",
    "AUTH_REASONS",
    "NONCE_WINDOW_S",
    "Signer",
    "Verifier",
    "auth_mac",
    "next_nonce",
    "request_frames",
    "sign_request",
    "verifier_for",
]

log = logging.getLogger(__name__)

AUTH_FLAG = 1
AUTH_FRAME_SIZE = 48
NONCE_WINDOW_S = 300.0
# Nonces remembered per identity: past it the oldest is forgotten and nothing at or below it
# is accepted any more (a client whose clock lags another of the same identity by more than
# what this many requests span is refused until its clock passes that floor).
DEFAULT_MAX_NONCES = 65_536
_PREFIX = struct.Struct("<B7xQ")
_LEN = struct.Struct("<I")
_JOIN_BELOW = 64 * 1024
_APP_KEY_CACHE = 4096

Buffer = bytes | memoryview

# Why a request was refused, as the UNAUTHORIZED reply's ``details.reason`` says it (PROTOCOL
# §2.1). Deliberately coarse: what the sender already knows or could try for itself (its
# frame's shape, its clock against the server's: PING tells that), never which part of a bad
# MAC is wrong. Window and replay are judged only after the MAC checks, so only a holder of
# the key ever learns them.
REASON_UNSIGNED = "signature required"
REASON_MALFORMED = "malformed auth frame"
REASON_BAD_MAC = "bad signature"
REASON_WINDOW = "nonce outside the window"
REASON_REPLAY = "replayed nonce"
REASON_SCHEME = "member signature required"
AUTH_REASONS = (
    REASON_UNSIGNED,
    REASON_MALFORMED,
    REASON_BAD_MAC,
    REASON_WINDOW,
    REASON_REPLAY,
    REASON_SCHEME,
)


def _refusal(reason: str, why: str) -> Unauthorized:
    """An UNAUTHORIZED whose public ``reason`` goes to the sender and ``why`` to the log only."""
    return Unauthorized(why, {"reason": reason})


def auth_mac(key: bytes, header: Buffer, prefix: Buffer, body: Buffer, first: Buffer | None) -> bytes:
    """The 32-byte MAC of a request: keyed blake3 over header ‖ prefix ‖ u32 len(body) ‖ body ‖ first."""
    parts = [header, prefix, _LEN.pack(len(body)), body]
    if first is not None:
        parts.append(first)
    if sum(len(p) for p in parts) <= _JOIN_BELOW:
        return blake3.blake3(b"".join(parts), key=key).digest()
    h = blake3.blake3(key=key)
    for part in parts:
        h.update(part)
    return h.digest()


class _Clock:
    """Microseconds since the epoch, strictly increasing in this process (all threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def __call__(self) -> int:
        now = time.time_ns() // 1000
        with self._lock:
            self._last = max(now, self._last + 1)
            return self._last


next_nonce = _Clock()


def sign_request(scheme: int, key: bytes, header: Buffer, body: Buffer, first: Buffer | None) -> bytes:
    """The 48-byte auth frame of a request whose header already has ``AUTH_FLAG`` set."""
    prefix = _PREFIX.pack(scheme, next_nonce())
    return prefix + auth_mac(key, header, prefix, body, first)


class Signer:
    """The keys one client signs with, and which it uses for each request.

    An app-scoped request (or an open one, such as a repeated ``REGISTER_APP``) whose
    body names an ``app_id`` the signer holds a key for is signed with that app key
    (scheme 2); any other request with the member key when the signer has it (scheme 1);
    else it goes unsigned. Thread-safe.

    Parameters:
        member_key: the cluster's member key (members only; clients never have it).
    """

    def __init__(self, member_key: bytes | None = None) -> None:
        self._member_key = member_key
        self._app_keys: dict[str, bytes] = {}

    @classmethod
    def member(cls, secret: ClusterSecret | None) -> Signer | None:
        """A member's signer, or None without a secret (library use, unsigned)."""
        return cls(secret.member_key) if secret is not None else None

    @property
    def is_member(self) -> bool:
        return self._member_key is not None

    def add_app(self, app_id: str, key: bytes) -> None:
        """Sign ``app_id``'s requests with ``key`` (32 bytes, from ``REGISTER_APP``)."""
        if len(key) != 32:
            raise ValueError(f"an app key is 32 bytes, got {len(key)}")
        self._app_keys[app_id] = bytes(key)

    def forget_app(self, app_id: str) -> None:
        self._app_keys.pop(app_id, None)

    def app_key(self, app_id: str) -> bytes | None:
        return self._app_keys.get(app_id)

    def credentials(self, msg_type: int, body: dict[str, Any]) -> tuple[int, bytes] | None:
        """``(scheme, key)`` for this request, or None to send it unsigned."""
        if access_of(msg_type) is not Access.MEMBER:
            app_id = body.get("app_id")
            if isinstance(app_id, str):
                key = self._app_keys.get(app_id)
                if key is not None:
                    return Scheme.APP, key
        if self._member_key is not None:
            return Scheme.MEMBER, self._member_key
        return None


def request_frames(
    signer: Signer | None,
    msg_type: int,
    request_id: int,
    body: dict[str, Any],
    data: bytes,
    payloads: Sequence[Buffer],
) -> list[Buffer]:
    """``[header, body, (auth), *payloads]`` of one request, signed when ``signer`` has a key for it."""
    creds = signer.credentials(msg_type, body) if signer is not None else None
    if creds is None:
        return [encode_header(Kind.REQUEST, msg_type, request_id), data, *payloads]
    header = encode_header(Kind.REQUEST, msg_type, request_id, flags=AUTH_FLAG)
    auth = sign_request(creds[0], creds[1], header, data, payloads[0] if payloads else None)
    return [header, data, auth, *payloads]


@dataclass(slots=True)
class _Seen:
    """What one identity sent inside the window, and the floor at or below which all is refused.

    Each request is remembered as one int: its nonce in the high bits and the first 8 bytes
    of its MAC in the low 64, so that ordering is by nonce and two requests of the same
    identity that drew the same microsecond (two processes of one app) are both taken;
    a replay, the same request again, has the same nonce and MAC.
    """

    floor: int = 0
    nonces: set[int] = field(default_factory=set)
    heap: list[int] = field(default_factory=list)


class Verifier:
    """Checks the auth frame of every request one server receives (not thread-safe: one per server).

    Parameters:
        secret: the cluster secret; app keys are derived from it and the key tag of the app's
            registration, never looked up at another server.
        app_tags: the key tag of an app's current registration here: a string ("" for an app
            registered before tags), or None when this server does not know the app. Then an
            app-signed request is answered with ``unknown_app``'s error (an open one, such as
            ``REGISTER_APP``, is taken as unsigned). None (no table): every app is keyed by
            its id alone (tools and tests).
        unknown_app: the error for a request of an app this server does not know (default
            ``UNAUTHORIZED``); a master answers ``UNKNOWN_APP`` (or ``NOT_LEADER`` when it
            does not serve), a worker ``STALE_LOCATION``. None from it: the request goes to
            the handler as ``Scheme.NONE``, which must then answer it without acting for
            the app (the master's ``UNREGISTER_APP`` of an app that is gone).
        window_s: how far a nonce may be from this server's clock.
        max_nonces: nonces remembered per identity (member, or one app).
        clock: seconds since the epoch (tests).
    """

    def __init__(
        self,
        secret: ClusterSecret,
        *,
        app_tags: Callable[[str], str | None] | None = None,
        unknown_app: Callable[[int, str], CroupierError | None] | None = None,
        window_s: float = NONCE_WINDOW_S,
        max_nonces: int = DEFAULT_MAX_NONCES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self._app_tags = app_tags
        self._unknown_app = unknown_app
        self._member_key = secret.member_key
        self._window_us = int(window_s * 1_000_000)
        self._max_nonces = max_nonces
        self._clock = clock
        self._app_keys: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._seen: dict[tuple[int, str], _Seen] = {}
        self._checks = itertools.count()

    def check(
        self,
        msg_type: int,
        header: Buffer,
        body: dict[str, Any],
        raw_body: Buffer,
        auth: Buffer | None,
        payloads: Sequence[Buffer],
    ) -> Scheme:
        """The scheme the request is validly signed with (``NONE`` for an unsigned open one).

        An app-signed open message whose body has no ``app_id`` is served as unsigned
        (``NONE``): there is no app whose key would check it.

        Raises:
            Unauthorized: unsigned where a signature is needed, a bad frame or MAC, a nonce
                outside the window or seen before, or a scheme too weak for ``msg_type``.
            CroupierError: ``unknown_app``'s error: signed by an app this server does not know.
        """
        if auth is None:
            if not allows(msg_type, Scheme.NONE):
                raise _refusal(REASON_UNSIGNED, "this request must be signed")
            return Scheme.NONE
        if len(auth) != AUTH_FRAME_SIZE or len(header) != HEADER_SIZE:
            raise _refusal(REASON_MALFORMED, f"the auth frame is {AUTH_FRAME_SIZE} bytes, got {len(auth)}")
        scheme, nonce = _PREFIX.unpack_from(auth)
        if bytes(auth[1:8]) != bytes(7):
            raise _refusal(REASON_MALFORMED, "auth frame bytes 1..7 are not zero")
        if (
            scheme == Scheme.APP
            and access_of(msg_type) is Access.OPEN
            and not isinstance(body.get("app_id"), str)
        ):
            # An open message that names no app (PING, STATUS, a first REGISTER_APP): no key to
            # check the frame against, and none needed. Served as unsigned, so that a client
            # may sign everything it sends.
            return Scheme.NONE
        found = self._key(msg_type, scheme, body)
        if found is None:  # signed by an app unknown here: as if unsigned (see ``unknown_app``)
            return Scheme.NONE
        key, identity = found
        mac = auth_mac(key, header, auth[:16], raw_body, payloads[0] if payloads else None)
        if not hmac.compare_digest(mac, bytes(auth[16:48])):
            raise _refusal(REASON_BAD_MAC, "bad MAC")
        self._fresh((scheme, identity), nonce, mac)
        if not allows(msg_type, Scheme(scheme)):
            raise _refusal(REASON_SCHEME, "this request must be signed by a member")
        return Scheme(scheme)

    def _key(self, msg_type: int, scheme: int, body: dict[str, Any]) -> tuple[bytes, str] | None:
        """The key and replay identity of the request; None: an open request of an unknown app.

        Raises:
            Unauthorized: an unknown scheme, an app signature without the body's app id.
            CroupierError: ``unknown_app``'s: an app-signed request of an app unknown here.
        """
        if scheme == Scheme.MEMBER:
            return self._member_key, ""
        if scheme != Scheme.APP:
            raise _refusal(REASON_MALFORMED, f"unknown auth scheme {scheme}")
        app_id = body.get("app_id")
        if not isinstance(app_id, str):
            raise _refusal(REASON_BAD_MAC, "an app signature needs the body's app_id")
        tag = "" if self._app_tags is None else self._app_tags(app_id)
        if tag is None:
            level = access_of(msg_type)
            if level is Access.OPEN:
                return None
            if self._unknown_app is not None and level is Access.APP:
                error = self._unknown_app(msg_type, app_id)
                if error is None:
                    return None
                raise error
            raise _refusal(REASON_BAD_MAC, f"app {app_id!r} is not known here")
        cache = (app_id, tag)
        key = self._app_keys.get(cache)
        if key is None:
            key = self._app_keys[cache] = self._secret.app_key(app_id, tag)
            if len(self._app_keys) > _APP_KEY_CACHE:
                self._app_keys.popitem(last=False)
        else:
            self._app_keys.move_to_end(cache)
        return key, app_id

    def _fresh(self, identity: tuple[int, str], nonce: int, mac: bytes) -> None:
        """Refuse a nonce out of the window, or a request seen before; remember it (bounded)."""
        now = int(self._clock() * 1_000_000)
        if abs(nonce - now) > self._window_us:
            raise _refusal(REASON_WINDOW, "the nonce is out of the server's time window (check the clocks)")
        if next(self._checks) % 4096 == 0:
            self._sweep(now)
        seen = self._seen.get(identity)
        if seen is None:
            seen = self._seen[identity] = _Seen()
        mark = (nonce << 64) | int.from_bytes(mac[:8], "little")
        if mark <= seen.floor or mark in seen.nonces:
            raise _refusal(REASON_REPLAY, "a replayed request (its nonce and MAC were seen before)")
        seen.nonces.add(mark)
        heapq.heappush(seen.heap, mark)
        self._prune(seen, now)

    def _prune(self, seen: _Seen, now: int) -> None:
        oldest_kept = (now - self._window_us) << 64
        while seen.heap and (seen.heap[0] < oldest_kept or len(seen.heap) > self._max_nonces):
            oldest = heapq.heappop(seen.heap)
            seen.nonces.discard(oldest)
            seen.floor = max(seen.floor, oldest)

    def _sweep(self, now: int) -> None:
        """Forget identities with nothing left in the window (their nonces would be refused anyway)."""
        for identity, seen in list(self._seen.items()):
            self._prune(seen, now)
            if not seen.heap:
                del self._seen[identity]

    def identities(self) -> int:
        """How many identities have nonces remembered (tests, stats)."""
        return len(self._seen)


def verifier_for(
    secret: ClusterSecret | None,
    *,
    app_tags: Callable[[str], str | None] | None = None,
    unknown_app: Callable[[int, str], CroupierError | None] | None = None,
) -> Verifier | None:
    """A server's verifier, or None without a secret (library use: everything accepted)."""
    if secret is None:
        return None
    return Verifier(secret, app_tags=app_tags, unknown_app=unknown_app)
