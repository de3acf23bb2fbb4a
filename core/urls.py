"""Hosts and URLs: master URLs (``tcp://host:port[,...]`` or ``zk://host:port[,...]/root``),
and the checks that hosts and ``tcp://host:port`` endpoints from the wire pass.

A host is an IPv4 or IPv6 literal, or a DNS name: ASCII labels of 1..63 characters from
``[A-Za-z0-9_-]``, at most 253 characters in all, or a Unicode name whose IDNA form is
one. Anything else (a lone surrogate, a space, a control character) is ``BadRequest``:
it would otherwise reach a ZeroMQ endpoint, a log record or another server. Stateless.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from croupier.core.errors import BadRequest

__all__ = [
    "MAX_HOST_LENGTH",
    "MasterUrl",
    "check_host",
    "check_port",
    "check_tcp_url",
    "parse_listen",
    "parse_master_url",
]

MAX_HOST_LENGTH = 253
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,63}")
# the longest tcp://[v6 literal]:port is far below this; checked before any parsing
_MAX_URL_LENGTH = 6 + 2 + MAX_HOST_LENGTH + 6


def _ascii_host(value: str) -> str:
    """The ASCII (IDNA) form of a DNS name, or ``value`` itself when it is ASCII already."""
    if value.isascii():
        return value
    try:
        return value.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise BadRequest(f"host {value!r} is neither ASCII nor a valid IDNA name") from exc


def check_host(value: object, field: str = "host") -> str:
    """Check a host: an IP literal or an ASCII/IDNA DNS name (see the module docstring).

    Raises:
        BadRequest: naming ``field``.
    """
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_HOST_LENGTH:
        raise BadRequest(f"{field} must be 1..{MAX_HOST_LENGTH} characters, got {len(value)}")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = _ascii_host(value)
    if len(name) > MAX_HOST_LENGTH or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise BadRequest(f"{field} {value!r} is not an IP address or a DNS name")
    return value


def check_port(value: object, field: str) -> int:
    """Check a TCP port: an integer in 1..65535.

    Raises:
        BadRequest: naming ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise BadRequest(f"{field} must be an integer in 1..65535, got {value!r}")
    return value


def check_tcp_url(value: object, field: str = "url") -> str:
    """Check a ZeroMQ endpoint ``tcp://host:port`` (``tcp://[v6]:port`` for IPv6).

    Raises:
        BadRequest: another scheme, a bad host or a port out of 1..65535, naming ``field``.
    """
    if not isinstance(value, str) or len(value) > _MAX_URL_LENGTH or not value.startswith("tcp://"):
        raise BadRequest(f"{field} {value!r:.80} is not tcp://host:port")
    host, sep, port = value[len("tcp://") :].rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        raise BadRequest(f"{field} {value!r} is not tcp://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not isinstance(_ip_or_none(host), ipaddress.IPv6Address):
            raise BadRequest(f"{field} {value!r}: [{host}] is not an IPv6 address")
    elif ":" in host:
        raise BadRequest(f"{field} {value!r}: an IPv6 host goes in brackets, tcp://[::1]:port")
    check_host(host, field)
    check_port(int(port), field)
    return value


def _ip_or_none(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


_HOSTPORT = re.compile(r"\[?([A-Za-z0-9.\-:]+?)\]?:([0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class MasterUrl:
    """A parsed master URL.

    ``endpoints`` are ZeroMQ endpoints (``tcp://h:p``) for ``kind == "tcp"``;
    for ``kind == "zk"`` they are ZooKeeper ``host:port`` pairs and ``root`` is
    the chroot holding ``/leader``.
    """

    kind: str
    endpoints: tuple[str, ...]
    root: str = ""


def _hostport(text: str, original: str) -> tuple[str, int]:
    m = _HOSTPORT.fullmatch(text)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"bad host:port {text!r} in master URL {original!r}")
    return m.group(1), int(m.group(2))


def parse_master_url(url: str) -> MasterUrl:
    """Parse a master URL.

    Raises:
        ValueError: with the expected forms in the message.
    """
    url = url.strip()
    if url.startswith("zk://"):
        rest = url[len("zk://") :]
        hosts, sep, root = rest.partition("/")
        if not sep or not root or not hosts:
            raise ValueError(f"ZooKeeper URL {url!r} must look like zk://h1:2181,h2:2181/root")
        pairs = tuple(f"{h}:{p}" for h, p in (_hostport(x, url) for x in hosts.split(",")))
        return MasterUrl("zk", pairs, "/" + root.strip("/"))
    endpoints = []
    for raw in url.split(","):
        part = raw.strip()
        if not part.startswith("tcp://"):
            raise ValueError(
                f"master URL {url!r}: expected tcp://host:port[,tcp://host:port...] or zk://hosts/root"
            )
        host, port = _hostport(part[len("tcp://") :], url)
        endpoints.append(f"tcp://{host}:{port}")
    return MasterUrl("tcp", tuple(endpoints))


def parse_listen(text: str, default_port: int = 9097) -> str:
    """``HOST:PORT``, ``HOST``, ``:PORT`` or ``tcp://HOST:PORT`` -> a ZeroMQ bind endpoint."""
    text = text.strip().removeprefix("tcp://")
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"bad listen address {text!r}: expected HOST:PORT (port 0 = any free port)")
    return f"tcp://{host}:{int(port)}"
