"""The ceiling's three processes: server, mapper and reducer (run by :mod:`croupier.tools.ceiling`).

Each runs as its own single-threaded Python process (plus libzmq's I/O thread), started as
``python -m croupier.tools.ceiling_roles ROLE JSON`` with its keyword arguments as a JSON
object. Nothing here is Croupier's service logic: no digests checked on the server, no
acks beyond "in RAM", no index, no actors. That is the point: it is the bare pipeline
the service is measured against.

- server (ROUTER): keeps pushed blocks in RAM and acks them; on ``F`` writes its primary
  blocks into one file per partition (``os.writev``, or O_DIRECT through one aligned
  staging buffer), fsyncs and drops RAM; on ``G`` streams a partition file back in
  chunks; on ``Q`` quits. Its first stdout line is ``READY <endpoint>``.
- mapper (a DEALER per server): pushes each block to its primary and to the other server
  (2 in-memory replicas, zero-copy sends), at most ``window`` un-acked messages.
- reducer (a DEALER per server): fetches whole partitions from their primaries.

Mappers and reducers print one JSON line: their first and last ``perf_counter`` (a
system-wide monotonic clock on Linux, so phases are timed across processes) and bytes.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq

__all__ = ["HEADER", "MiB", "write_buffered", "write_direct"]

MiB = 1 << 20
HEADER = struct.Struct("<IQB")  # partition, seq, role (0 primary, 1 replica)
_U32 = struct.Struct("<I")
_ALIGN = 4096  # O_DIRECT wants the buffer, the file offset and the length aligned
_STAGE = 4 * MiB
_WRITEV_MAX = 512  # below IOV_MAX (1024)


def write_buffered(path: str, buffers: Sequence[memoryview]) -> int:
    """Write ``buffers`` to a new file at ``path`` through the page cache; returns bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        for i in range(0, len(buffers), _WRITEV_MAX):
            written += os.writev(fd, buffers[i : i + _WRITEV_MAX])
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def write_direct(path: str, buffers: Sequence[memoryview], stage: mmap.mmap) -> int:
    """Write ``buffers`` to a new file at ``path`` with O_DIRECT, bypassing the page cache.

    Bytes are gathered into ``stage`` (page-aligned, as every anonymous mmap is, and a
    multiple of 4 KiB long); the last piece is padded to 4 KiB and the file truncated back
    to its true length. Returns the bytes of data written.

    Raises:
        OSError: ``EINVAL`` when the filesystem refuses O_DIRECT (the caller falls back).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        fill = 0
        total = 0
        for buf in buffers:
            off = 0
            while off < len(buf):
                n = min(len(buf) - off, len(stage) - fill)
                stage[fill : fill + n] = buf[off : off + n]
                fill += n
                off += n
                if fill == len(stage):
                    os.write(fd, stage)
                    fill = 0
            total += len(buf)
        if fill:
            os.write(fd, memoryview(stage)[: -(-fill // _ALIGN) * _ALIGN])
            os.ftruncate(fd, total)
        os.fsync(fd)
    finally:
        os.close(fd)
    return total


def _prewarm_heap(mib: int) -> None:
    """Fault in ``mib`` MiB of heap and free it again.

    With the tuned glibc settings (one arena, a 32 MiB mmap threshold, no trimming, see
    :mod:`croupier.tools.ceiling`) glibc keeps those pages, so libzmq's per-message
    mallocs land on memory that is already backed instead of faulting page by page.
    """
    warm = [bytearray(MiB) for _ in range(mib)]  # bytearray(n) zero-fills: every page is touched
    del warm


def _staging_buffer() -> mmap.mmap:
    """The O_DIRECT staging buffer, touched once here so that flushes reuse faulted pages."""
    stage = mmap.mmap(-1, _STAGE)
    for page in range(0, _STAGE, mmap.PAGESIZE):
        stage[page] = 0
    return stage


class _Server:
    """A server's RAM and files. Only the server process's one thread touches it."""

    def __init__(self, sid: int, directory: str, flush_replicas: bool, cold: bool, odirect: bool) -> None:
        self.sid = sid
        self.directory = directory
        self.flush_replicas = flush_replicas
        self.cold = cold
        self.stage = _staging_buffer() if odirect else None
        self.note = ""
        self.blocks: tuple[dict[int, list[zmq.Frame]], dict[int, list[zmq.Frame]]] = ({}, {})
        self.ram_bytes = 0

    def keep(self, header: bytes, block: zmq.Frame) -> None:
        partition, _, role = HEADER.unpack(header)
        self.blocks[role].setdefault(partition, []).append(block)
        self.ram_bytes += len(block.buffer)

    def path(self, tag: str, partition: int) -> str:
        return f"{self.directory}/s{self.sid}_{tag}{partition}.bin"

    def flush(self) -> dict[str, Any]:
        """Write the blocks to files, fsync, and drop them from RAM; what was done."""
        started = time.perf_counter()
        primaries, replicas = self.blocks
        todo = [("p", p, frames) for p, frames in primaries.items()]
        if self.flush_replicas:
            todo += [("r", p, frames) for p, frames in replicas.items()]
        written = 0
        for tag, partition, frames in todo:
            written += self._write(self.path(tag, partition), [f.buffer for f in frames])
        report = {
            "written": written,
            "sec": time.perf_counter() - started,
            "ram_bytes": self.ram_bytes,
            "odirect": self.stage is not None,
            "note": self.note,
        }
        self.blocks = ({}, {})
        self.ram_bytes = 0
        return report

    def _write(self, path: str, buffers: list[memoryview]) -> int:
        if self.stage is not None:
            try:
                written = write_direct(path, buffers, self.stage)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # tmpfs (before Linux 6.6) and some FUSE filesystems refuse O_DIRECT
                self.note = f"O_DIRECT refused in {self.directory} ({exc.strerror}): flushed via page cache"
                self.stage = None
        if self.stage is None:
            written = write_buffered(path, buffers)
        if self.cold:
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return written

    def serve(self, sock: zmq.Socket[bytes], ident: zmq.Frame, partition: int, chunk: int) -> None:
        """Stream one partition file to ``ident`` in ``chunk``-sized ``D`` frames, then ``E``."""
        total = 0
        try:
            fd = os.open(self.path("p", partition), os.O_RDONLY)
        except FileNotFoundError:  # no block was pushed to this partition: it is empty
            sock.send_multipart([ident, b"E", struct.pack("<Q", 0)])
            return
        try:
            while piece := os.read(fd, chunk):
                total += len(piece)
                sock.send_multipart([ident, b"D", piece], copy=False)
        finally:
            os.close(fd)
        sock.send_multipart([ident, b"E", struct.pack("<Q", total)])


def server(
    sid: int, addr: str, directory: str, flush_replicas: bool, cold: bool, prewarm_mib: int, odirect: bool
) -> None:
    """Serve pushes, flushes and fetches at ``addr`` until told to quit (see the module doc)."""
    if prewarm_mib:
        _prewarm_heap(prewarm_mib)
    state = _Server(sid, directory, flush_replicas, cold, odirect)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        sock.router_mandatory = 1
        sock.rcvhwm = sock.sndhwm = 4096
        sock.bind(addr)
        print("READY", sock.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
        while True:
            msg = sock.recv_multipart(copy=False)
            ident, kind = msg[0], msg[1].bytes
            if kind == b"P":
                state.keep(msg[2].bytes, msg[3])
                sock.send_multipart([ident, b"A", msg[2]], copy=False)
            elif kind == b"F":
                sock.send_multipart([ident, b"FD", json.dumps(state.flush()).encode()])
            elif kind == b"G":
                state.serve(sock, ident, *(_U32.unpack(m.bytes)[0] for m in msg[2:4]))
            elif kind == b"Q":
                sock.send_multipart([ident, b"QD"])
                return
    finally:
        sock.close(linger=1000)
        ctx.term()


def _connect(ctx: zmq.Context[zmq.Socket[bytes]], addrs: list[str]) -> list[zmq.Socket[bytes]]:
    socks = []
    for addr in addrs:
        sock = ctx.socket(zmq.DEALER)
        sock.sndhwm = sock.rcvhwm = 4096
        sock.connect(addr)
        socks.append(sock)
    return socks


def _wait_until(wall_clock: float) -> None:
    """A common start for every mapper (or reducer): their process start-up is not timed."""
    while time.time() < wall_clock:
        time.sleep(0.0005)


def _drain(poller: zmq.Poller) -> int:
    """Wait for acks and read every one that is there; how many."""
    events = poller.poll(10_000)
    if not events:
        raise RuntimeError("no ack within 10 s")
    acks = 0
    for sock, _ in events:
        while True:
            try:
                sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            acks += 1
    return acks


def mapper(
    mid: int, addrs: list[str], total: int, block: int, window: int, parts: int, do_hash: bool, start: float
) -> None:
    """Push ``total`` bytes in ``block``-sized blocks, each to two servers; print the timing."""
    import blake3

    ctx = zmq.Context()
    socks = _connect(ctx, addrs)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    pool = [os.urandom(block) for _ in range(max(4, 64 * MiB // block))]
    nblocks = total // block
    _wait_until(start)
    t0 = time.perf_counter()
    inflight = 0
    for i in range(nblocks):
        payload = pool[i % len(pool)]
        if do_hash:  # what a client would spend on a digest per block
            blake3.blake3(payload).digest()
        partition = (mid * 7919 + i) % parts
        primary = partition % 2
        for role, srv in ((0, primary), (1, 1 - primary)):
            socks[srv].send_multipart([b"P", HEADER.pack(partition, i, role), payload], copy=False)
            inflight += 1
        while inflight >= window:
            inflight -= _drain(poller)
    while inflight > 0:
        inflight -= _drain(poller)
    t1 = time.perf_counter()
    print(json.dumps({"t0": t0, "t1": t1, "bytes": nblocks * block}), flush=True)
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


def reducer(rid: int, addrs: list[str], parts: list[int], chunk: int, do_hash: bool, start: float) -> None:
    """Fetch every partition in ``parts`` from its primary server; print the timing."""
    import blake3

    ctx = zmq.Context()
    socks = _connect(ctx, addrs)
    _wait_until(start)
    t0 = time.perf_counter()
    got = 0
    for partition in parts:
        sock = socks[partition % 2]
        sock.send_multipart([b"G", _U32.pack(partition), _U32.pack(chunk)])
        while True:
            if not sock.poll(60_000):
                raise RuntimeError(f"no data for partition {partition} within 60 s")
            frames = sock.recv_multipart(copy=False)
            if frames[0].bytes == b"E":
                break
            got += len(frames[1].buffer)
            if do_hash:
                blake3.blake3(frames[1].buffer).digest()
    t1 = time.perf_counter()
    print(json.dumps({"rid": rid, "t0": t0, "t1": t1, "bytes": got}), flush=True)
    for sock in socks:
        sock.close(linger=0)
    ctx.term()


ROLES: dict[str, Callable[..., None]] = {"server": server, "mapper": mapper, "reducer": reducer}

if __name__ == "__main__":
    ROLES[sys.argv[1]](**json.loads(sys.argv[2]))
