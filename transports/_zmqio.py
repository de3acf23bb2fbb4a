"""Multipart send and receive without pyzmq's Python layer (the hot RPC paths).

``Socket.send_multipart``/``recv_multipart`` are Python: per frame they combine enum
flags (``zmq.SNDMORE | flags`` builds an ``IntFlag``), go through ``Socket.send``'s
keyword handling, and on receive ask ``getsockopt(RCVMORE)`` through the option enum.
On this project's 2-core VM a 3-frame request and its reply cost about 38 µs that way
and about 11 µs through the compiled ``zmq.backend.Socket`` methods with plain int
flags, reading ``Frame.more``; at the master's command rate that is a large part of a
command's CPU (BENCHMARKS.md, control). Same semantics: ``copy=False`` still copies
frames under the socket's ``copy_threshold``, and every frame is checked to be a buffer
before the first is sent, so that a bad payload never leaves half a message queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zmq
import zmq.backend

__all__ = ["recv_frames", "send_frames"]

_send: Any = zmq.backend.Socket.send
_recv: Any = zmq.backend.Socket.recv
_NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_BUFFERS = (bytes, zmq.Frame, memoryview)


def recv_frames(sock: zmq.Socket[Any]) -> list[zmq.Frame]:
    """The next multipart message as frames (no copy), without blocking.

    Raises:
        zmq.Again: no message is waiting.
    """
    frame: zmq.Frame = _recv(sock, _NOBLOCK, False)
    frames = [frame]
    while frame.more:  # a multipart message arrives whole: its other frames are there
        frame = _recv(sock, _NOBLOCK, False)
        frames.append(frame)
    return frames


def send_frames(
    sock: zmq.Socket[Any], frames: Sequence[Any], track: bool = False
) -> zmq.MessageTracker | None:
    """Send ``frames`` as one multipart message, ``NOBLOCK``, ``copy=False``; the last frame
    tracked when ``track`` (libzmq releases it after the earlier ones).

    Raises:
        TypeError: a frame is not a buffer (checked before anything is sent).
        zmq.Again, zmq.ZMQError: as ``Socket.send``.
    """
    for frame in frames:
        if type(frame) not in _BUFFERS:
            memoryview(frame)  # raises TypeError for a non-buffer, as send_multipart does
    last = len(frames) - 1
    for i in range(last):
        _send(sock, frames[i], _MORE_NOBLOCK, False, False)
    tracker: zmq.MessageTracker | None = _send(sock, frames[last], _NOBLOCK, False, track)
    return tracker
