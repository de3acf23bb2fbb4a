"""Helpers for the live tests: raw requests to a real server, a normal small shuffle."""

from __future__ import annotations

import itertools
import json

import zmq

import croupier
from croupier.core.config import ClientConfig
from croupier.core.wire import Header, Kind

__all__ = ["FAST", "RawClient", "small_shuffle"]

FAST = ClientConfig(
    rpc_timeout=5.0, app_heartbeat_interval=0.5, push_buffer_size=512, commit_wait_timeout=30.0
)
_Sock = zmq.Socket[bytes]


class RawClient:
    """A DEALER that sends hand-made frames (a body that no SDK would encode) and reads the status.

    ``request`` returns the reply's status, or None when no reply came within ``timeout``
    (libzmq dropped the connection, or the server is gone).
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._sock: _Sock = zmq.Context.instance().socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(url)

    def request(self, msg_type: int, body: bytes | object, *payloads: bytes) -> int | None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        rid = next(self._ids)
        self._sock.send_multipart([Header(Kind.REQUEST, msg_type, rid).encode(), raw, *payloads])
        while self._sock.poll(int(self.timeout * 1000)):
            frames = self._sock.recv_multipart()
            header = Header.decode(frames[0])
            if header.request_id == rid:
                return header.status
        return None

    def close(self) -> None:
        self._sock.close(linger=0)


def small_shuffle(master_url: str, name: str = "after", partitions: int = 6) -> None:
    """Write and read a small shuffle end to end; raises if anything is lost."""
    with croupier.connect(master_url, config=FAST) as client:
        shuffle = client.register_app(name).register_shuffle(2, partitions)
        for m in range(2):
            writer = shuffle.writer(m)
            for i in range(50):
                writer.write(i % partitions, f"{m}-{i}".encode())
            assert writer.close()
        got = sorted(r.decode() for p in range(partitions) for r in shuffle.reader(p))
        assert got == sorted(f"{m}-{i}" for m in range(2) for i in range(50))
