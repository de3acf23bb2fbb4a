"""Master URLs: ``tcp://host:port[,tcp://host:port...]`` or ``zk://host:port[,host:port...]/root``."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MasterUrl", "parse_listen", "parse_master_url"]

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
