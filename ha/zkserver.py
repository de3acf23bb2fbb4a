"""``LocalZooKeeper``: real ZooKeeper servers from the system install, on loopback ports.

Used by the integration tests and by ``croupier local --ha``. It runs the
Debian ``zookeeper`` package's jars (``apt-get install zookeeper``; Java 17)
as child processes, one per node, each with its own directory under
``base_dir``::

    base_dir/node-<i>/zoo.cfg          the node's config (below)
    base_dir/node-<i>/data/myid        i + 1 (ZooKeeper server ids start at 1)
    base_dir/node-<i>/zookeeper.log    log4j output (read it when a test fails)
    base_dir/node-<i>/stdout.log       the JVM's stdout and stderr

Every node listens on 127.0.0.1 only, on free ports picked at ``start`` (a
client port, plus a quorum and an election port in an ensemble) and kept for
restarts. Timing is scaled by ``tick_ms`` so that failover tests are fast:
sessions may last ``2 * tick_ms`` to ``40 * tick_ms``.

Usage::

    with LocalZooKeeper(tmp_path, nodes=3).start() as zk:
        client = KazooClient(hosts=zk.hosts)     # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        zk.stop_node(0)                          # SIGTERM; the other two keep a quorum
        zk.start_node(0)                         # back, with the same ports and data
        master_url = zk.url("/croupier")         # "zk://127.0.0.1:p1,...:p3/croupier"

Every process it starts, it stops (by pid, SIGTERM then SIGKILL): ``stop()``
is idempotent and runs on ``__exit__``.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

__all__ = [
    "DEBIAN_CLASSPATH",
    "JAVA_DIR",
    "ZOOKEEPER_CONF_DIR",
    "LocalZooKeeper",
    "ZooKeeperNotInstalled",
    "four_letter_word",
    "server_command",
    "zoo_cfg",
]

JAVA_DIR = "/usr/share/java"
ZOOKEEPER_CONF_DIR = "/etc/zookeeper/conf"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

# ZooKeeper's own jar names its dependencies in its manifest; these two add a
# logging backend (without one slf4j discards the server's log). The wildcard
# classpath is the fallback: it works too, but picks one of several slf4j
# bindings at random and says so on stderr.
_LOGGING_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
# Small heap and the serial collector: a test server holds a few MiB, and
# several JVMs share the machine with the tests.
_JVM_FLAGS = ("-Xms32m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true")
_STOP_TIMEOUT = 15.0


class ZooKeeperNotInstalled(RuntimeError):
    """ZooKeeper's jars or ``java`` are missing on this machine."""


def _check_installed() -> str:
    """The ``java`` executable, once ZooKeeper's jars are known to be there."""
    jars = glob.glob(os.path.join(JAVA_DIR, "zookeeper*.jar"))
    java = shutil.which("java")
    if not jars or java is None:
        missing = f"no {JAVA_DIR}/zookeeper*.jar" if not jars else "no `java` on PATH"
        raise ZooKeeperNotInstalled(
            f"ZooKeeper is not installed ({missing}); install it with `apt-get install -y zookeeper`"
            " (Debian's package brings the jars and a Java runtime)"
        )
    return java


DEBIAN_CLASSPATH = ":".join(
    [*(os.path.join(JAVA_DIR, name) for name in ("zookeeper.jar", *_LOGGING_JARS)), ZOOKEEPER_CONF_DIR]
)


def _classpath() -> str:
    jars = [os.path.join(JAVA_DIR, name) for name in ("zookeeper.jar", *_LOGGING_JARS)]
    if all(os.path.exists(j) for j in jars):
        return DEBIAN_CLASSPATH
    return f"{JAVA_DIR}/*:{ZOOKEEPER_CONF_DIR}"


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper "four letter word" (``ruok``, ``srvr``, ``mntr``...) and return the reply.

    Raises:
        OSError: nothing listens there, or it closed the connection early.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _free_ports(host: str, count: int) -> list[int]:
    # Hold every socket until all are bound, so that the ports are distinct.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def zoo_cfg(
    *, data_dir: str, client_port: int, host: str, tick_ms: int, servers: list[tuple[int, int]]
) -> str:
    """The text of a ``zoo.cfg`` for one node.

    ``servers`` holds each ensemble member's ``(quorum port, election port)`` in ``myid``
    order (member ``i`` is ``server.{i + 1}``); empty for a standalone server. Sessions may
    last ``2 * tick_ms`` to ``40 * tick_ms``. Also used by the container suites.
    """
    lines = [
        f"tickTime={tick_ms}",
        "initLimit=10",
        "syncLimit=5",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={host}",
        f"minSessionTimeout={2 * tick_ms}",
        f"maxSessionTimeout={40 * tick_ms}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=*",
        # Tests open many clients from one address; the default caps them at 60.
        "maxClientCnxns=0",
        # preAllocSize is in KiB: the 64 MiB default makes every fresh server write 64 MiB.
        "preAllocSize=1024",
        "snapCount=10000",
    ]
    lines += [f"server.{i + 1}={host}:{quorum}:{election}" for i, (quorum, election) in enumerate(servers)]
    return "\n".join(lines) + "\n"


def server_command(java: str, config: str, *, log_dir: str | None, classpath: str | None = None) -> list[str]:
    """The command line of one ZooKeeper server reading ``config``.

    With ``log_dir`` the server logs to a rolling file there; without, to stdout
    (what a container wants). ``classpath`` defaults to Debian's jars on this machine;
    ``DEBIAN_CLASSPATH`` names them for a machine that has the package. Also used by the
    container suites.
    """
    logging = (
        [f"-Dzookeeper.log.dir={log_dir}", "-Dzookeeper.root.logger=INFO,ROLLINGFILE"]
        if log_dir is not None
        else ["-Dzookeeper.root.logger=INFO,CONSOLE"]
    )
    return [
        java,
        *_JVM_FLAGS,
        "-cp",
        classpath if classpath is not None else _classpath(),
        "-Dzookeeper.admin.enableServer=false",
        *logging,
        MAIN_CLASS,
        config,
    ]


class _Node:
    """One server: its ports, its directory and (while it runs) its process."""

    def __init__(self, index: int, directory: Path, client: int, quorum: int, election: int) -> None:
        self.index = index
        self.directory = directory
        self.client_port = client
        self.quorum_port = quorum
        self.election_port = election
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: IO[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.directory / "zoo.cfg"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for name in ("zookeeper.log", "stdout.log"):
            path = self.directory / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(parts)


class LocalZooKeeper:
    """A standalone ZooKeeper (``nodes=1``) or an ensemble of ``nodes`` servers on this machine.

    Nodes are numbered from 0 in this API (their ZooKeeper ``myid`` is index + 1).

    Parameters:
        base_dir: where each node's config, data and logs go (created if missing).
        nodes: 1 for a standalone server, 3 or 5 for an ensemble.
        tick_ms: ZooKeeper's ``tickTime``; sessions may last 2 to 40 ticks.
        host: the loopback address every port binds to.

    State:
        nodes: one ``_Node`` per server (ports, directory, process).
        started: whether ``start`` ran (and ``stop`` has not).

    Raises:
        ZooKeeperNotInstalled: from ``start``, when the jars or ``java`` are missing.
    """

    def __init__(
        self, base_dir: str | os.PathLike[str], *, nodes: int = 1, tick_ms: int = 200, host: str = "127.0.0.1"
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, not {nodes}")
        if tick_ms < 10:
            raise ValueError(f"tick_ms must be >= 10, not {tick_ms}")
        self.base_dir = Path(base_dir)
        self.node_count = nodes
        self.tick_ms = tick_ms
        self.host = host
        self.nodes: list[_Node] = []
        self.started = False
        self._java = ""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Self:
        """Start every node and wait until each one serves (and, in an ensemble, a leader is elected).

        Raises:
            ZooKeeperNotInstalled: ZooKeeper's jars or ``java`` are missing.
            RuntimeError: a node exited, or did not serve within ``timeout``; the
                message carries the tail of its log. Nothing is left running.
        """
        if self.started:
            raise RuntimeError("this LocalZooKeeper is already started")
        self._java = _check_installed()
        ports = _free_ports(self.host, 3 * self.node_count)
        self.nodes = [
            _Node(i, self.base_dir / f"node-{i}", *ports[3 * i : 3 * i + 3]) for i in range(self.node_count)
        ]
        self.started = True
        try:
            for node in self.nodes:
                self._write_config(node)
            for node in self.nodes:
                self._spawn(node)
            self._wait_serving(self.nodes, time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 15 s). Idempotent."""
        for node in self.nodes:
            self._terminate(node, signal.SIGTERM)
        self.started = False

    def __enter__(self) -> Self:
        if not self.started:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- failure injection ------------------------------------------------------------------

    def stop_node(self, i: int) -> None:
        """Stop node ``i`` gracefully (SIGTERM) and wait for it to exit."""
        self._terminate(self._node(i), signal.SIGTERM)

    def kill_node(self, i: int) -> None:
        """Kill node ``i`` (SIGKILL): no goodbye to its peers or clients."""
        self._terminate(self._node(i), signal.SIGKILL)

    def start_node(self, i: int, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Start node ``i`` again with its old ports and data.

        With ``wait``, returns once it serves, which in an ensemble needs a quorum:
        to restart two of three nodes, start the first with ``wait=False``.

        Raises:
            RuntimeError: it exited or did not serve within ``timeout``.
        """
        node = self._node(i)
        if node.running():
            raise RuntimeError(f"ZooKeeper node {i} is already running")
        self._spawn(node)
        if wait:
            self._wait_serving([node], time.monotonic() + timeout)

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Wait until every running node serves and (in an ensemble) one of them leads.

        Raises:
            RuntimeError: a node exited, or they did not get there within ``timeout``.
        """
        self._wait_serving([n for n in self.nodes if n.running()], time.monotonic() + timeout)

    def mode(self, i: int) -> str | None:
        """``"standalone"``, ``"leader"`` or ``"follower"`` for a serving node; ``None`` otherwise."""
        node = self._node(i)
        if not node.running():
            return None
        try:
            reply = four_letter_word(self.host, node.client_port, "srvr")
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None  # "This ZooKeeper instance is not currently serving requests"

    # -- addresses --------------------------------------------------------------------------

    @property
    def hosts(self) -> str:
        """Kazoo's ``hosts`` string: ``"127.0.0.1:p1,127.0.0.1:p2,..."`` (every node, running or not)."""
        if not self.nodes:
            raise RuntimeError("LocalZooKeeper is not started")
        return ",".join(f"{self.host}:{n.client_port}" for n in self.nodes)

    def url(self, root: str) -> str:
        """A Croupier master URL: ``"zk://" + hosts + root`` (root starts with ``/``)."""
        if not root.startswith("/"):
            raise ValueError(f"root must start with '/', not {root!r}")
        return f"zk://{self.hosts}{root}"

    # -- internals --------------------------------------------------------------------------

    def _node(self, i: int) -> _Node:
        if not 0 <= i < len(self.nodes):
            raise IndexError(f"no ZooKeeper node {i} (nodes are 0..{len(self.nodes) - 1}; started?)")
        return self.nodes[i]

    def _write_config(self, node: _Node) -> None:
        data = node.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{node.index + 1}\n")
        servers = [(n.quorum_port, n.election_port) for n in self.nodes] if self.node_count > 1 else []
        node.config.write_text(
            zoo_cfg(
                data_dir=str(data),
                client_port=node.client_port,
                host=self.host,
                tick_ms=self.tick_ms,
                servers=servers,
            )
        )

    def _spawn(self, node: _Node) -> None:
        cmd = server_command(self._java, str(node.config), log_dir=str(node.directory))
        node.out = open(node.directory / "stdout.log", "ab")  # noqa: SIM115 - closed in _terminate
        node.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=node.out, stderr=subprocess.STDOUT, cwd=node.directory
        )

    def _terminate(self, node: _Node, sig: signal.Signals) -> None:
        proc = node.proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(sig)
                try:
                    proc.wait(timeout=_STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=_STOP_TIMEOUT)
            node.proc = None
        if node.out is not None:
            node.out.close()
            node.out = None

    def _wait_serving(self, nodes: list[_Node], deadline: float) -> None:
        pending = list(nodes)
        while True:
            for node in pending:
                if not node.running():
                    code = node.proc.returncode if node.proc is not None else None
                    raise RuntimeError(
                        f"ZooKeeper node {node.index} exited (code {code}) while starting\n{node.log_tail()}"
                    )
            pending = [n for n in pending if self.mode(n.index) is None]
            if not pending and self._has_leader():
                return
            if time.monotonic() > deadline:
                tails = "\n".join(n.log_tail() for n in pending or nodes)
                raise RuntimeError(
                    f"ZooKeeper nodes {[n.index for n in pending or nodes]} did not serve in time\n{tails}"
                )
            time.sleep(0.05)

    def _has_leader(self) -> bool:
        if self.node_count == 1:
            return True
        modes = [self.mode(n.index) for n in self.nodes if n.running()]
        return modes.count("leader") == 1

    def __repr__(self) -> str:
        running = [n.index for n in self.nodes if n.running()]
        hosts = self.hosts if self.nodes else "-"
        return f"<LocalZooKeeper nodes={self.node_count} running={running} hosts={hosts}>"
