"""ZeroMQ CURVE on Croupier's sockets (``--curve``; docs/guides/security.md, PROTOCOL §1).

CURVE (RFC 26, CurveZMQ) encrypts and authenticates every ZMTP connection: a client
that connects with the server's public key knows it talks to a member of the cluster,
and nobody on the network reads or changes the bytes. Every member's server (master,
each worker port) binds with the same key pair, derived from the cluster secret
(:meth:`ClusterSecret.curve_server_keys`); clients need only its public half
(``croupier secret-public FILE``) and make a fresh (ephemeral) key pair for every socket.
Servers accept any client key (no ZAP handler): CURVE gives confidentiality and server
authentication; which requests a peer may make is decided by the auth frame's MAC.

A plaintext peer and a CURVE peer never complete the ZMTP handshake: libzmq drops the
connection and retries, so the client sees no reply, and its timeout says that CURVE
may be the cause (:func:`timeout_hint`).

Usage::

    keys = CurveServer.from_secret(load_secret_file(path))   # a member: both sides
    server = RpcServer(bind, handler, curve=keys)
    client = RpcClient(url, curve=keys.client())              # or CurveClient.parse(public_z85)
"""

from __future__ import annotations

import binascii
import os
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from croupier.core.errors import BadRequest
from croupier.transports.secret import ClusterSecret

__all__ = ["CURVE_KEY_ENV", "CurveClient", "CurveServer", "curve_client_from_env", "timeout_hint"]

CURVE_KEY_ENV = "CROUPIER_CURVE_SERVER_KEY"
_Z85_KEY_LEN = 40  # a 32-byte key in Z85


def _check_key(key: bytes, what: str) -> bytes:
    """``key`` if it is a Z85-encoded 32-byte key.

    Raises:
        BadRequest: it is not.
    """
    try:
        ok = len(key) == _Z85_KEY_LEN and len(z85.decode(key)) == 32
    except (ValueError, binascii.Error, KeyError, IndexError, TypeError):
        ok = False
    if not ok:
        raise BadRequest(
            f"{what} is not a CURVE key (40 characters of Z85, from `croupier secret-public FILE`)"
        )
    return key


@dataclass(frozen=True, slots=True)
class CurveClient:
    """The client side: the server's public key (Z85, 40 bytes); a fresh key pair per socket."""

    server_public: bytes

    def __post_init__(self) -> None:
        _check_key(self.server_public, "the CURVE server key")

    @classmethod
    def parse(cls, text: str | bytes) -> CurveClient:
        """A client of the server whose Z85 public key is ``text`` (spaces around it ignored).

        Raises:
            BadRequest: ``text`` is not a Z85 CURVE key.
        """
        raw = text.encode("ascii", errors="replace") if isinstance(text, str) else text
        return cls(raw.strip())

    def apply(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE client (before ``connect``), with an ephemeral key pair."""
        public, secret = zmq.curve_keypair()
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)


@dataclass(frozen=True, slots=True)
class CurveServer:
    """A member's CURVE key pair (Z85): its servers bind with it, its clients use ``client()``."""

    public: bytes
    secret: bytes

    def __post_init__(self) -> None:
        _check_key(self.public, "the CURVE public key")
        _check_key(self.secret, "the CURVE secret key")

    def __repr__(self) -> str:  # never print the secret half
        return f"CurveServer(public={self.public.decode()!r})"

    @classmethod
    def from_secret(cls, secret: ClusterSecret) -> CurveServer:
        """The key pair every member derives from the cluster secret."""
        public, private = secret.curve_server_keys()
        return cls(public, private)

    def apply(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE server (before ``bind``); any client key is accepted."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def client(self) -> CurveClient:
        """A client of this key pair's servers (how members talk to each other)."""
        return CurveClient(self.public)


def curve_client_from_env(given: str | bytes | None) -> CurveClient | None:
    """The CURVE client for ``given`` (a Z85 server key), else ``$CROUPIER_CURVE_SERVER_KEY``, else None.

    Raises:
        BadRequest: the key is malformed.
    """
    text = given or os.environ.get(CURVE_KEY_ENV) or None
    return CurveClient.parse(text) if text else None


def timeout_hint(curve: CurveClient | None, answered: bool = False) -> str:
    """What a timed-out client adds to its message: why nobody may have answered.

    ``answered``: this server has answered this client before, so the handshake works and
    CURVE is not the cause: it stopped, restarted elsewhere or is overloaded.
    """
    if answered:
        return "; it answered this client before: it may have stopped, restarted or be overloaded"
    if curve is None:
        return (
            "; it never answered this client: it may be down, or the server may require CURVE (--curve):"
            f" give its public key (croupier secret-public FILE) as curve_server_key or ${CURVE_KEY_ENV}"
        )
    return (
        "; it never answered this client, which uses CURVE: it may be down, or the server may not"
        " use CURVE, or its key may differ from the one given"
    )
