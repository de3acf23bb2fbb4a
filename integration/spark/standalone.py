"""A Spark standalone cluster of processes whose two workers have different host names.

Spark never runs a speculative copy of a task on a host where an attempt of it already ran
(``TaskSetManager.dequeueTaskFromList``: ``!(speculative && hasAttemptOnHost(index, host))``), and
every executor of ``local-cluster[...]`` has the same host: speculation never launches there.
This cluster's master and two workers are separate JVMs; the workers call themselves
``127.0.0.1`` and ``localhost`` (both the loopback address), so each executor is a host of its
own and the other one may run a straggler's speculative copy.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from integration.spark.harness import jvm_tmp_env

HOSTS = ("127.0.0.1", "localhost")
_MASTER_URL = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A master and one worker per name in ``HOSTS`` (1 core, 1 GiB each), as child JVMs."""

    def __init__(self, base: Path, start_timeout: float = 300.0) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        home = spark_home()
        # SPARK_SCALA_VERSION: the executor launcher wants it outside a build tree (bin/spark-class
        # sets it); SPARK_LOCAL_IP keeps Spark on the loopback address
        self._env = {
            **jvm_tmp_env(base / "tmp"),  # the executors' lz4-java library too, not into /tmp
            "SPARK_HOME": str(home),
            "SPARK_SCALA_VERSION": "2.13",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        self._cp = f"{home}/jars/*"
        self._logs: list[IO[bytes]] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            master_log = base / "master.log"
            self._java(
                "org.apache.spark.deploy.master.Master",
                ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                master_log,
            )
            self.url = self._wait_for(master_log, _MASTER_URL, start_timeout)
            for i, host in enumerate(HOSTS):
                self._java(
                    "org.apache.spark.deploy.worker.Worker",
                    [
                        "--host",
                        host,
                        "--port",
                        "0",
                        "--webui-port",
                        "0",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--work-dir",
                        str(base / f"worker{i}"),
                        self.url,
                    ],
                    base / f"worker{i}.log",
                )
            for i in range(len(HOSTS)):
                self._wait_for(
                    base / f"worker{i}.log",
                    re.compile(r"(Successfully registered with master)"),
                    start_timeout,
                )
        except BaseException:
            self.stop()
            raise

    def _java(self, cls: str, args: list[str], log: Path) -> None:
        out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(out)
        self.procs.append(
            subprocess.Popen(
                ["java", "-Xmx256m", "-cp", self._cp, cls, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
            )
        )

    def _wait_for(self, log: Path, pattern: re.Pattern[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = pattern.search(log.read_text(errors="replace")) if log.exists() else None
            if match:
                return match.group(1)
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(
                    f"a Spark standalone process exited: {dead}\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.1)
        raise TimeoutError(f"{log.name}: no {pattern.pattern!r} after {timeout} s")

    def stop(self) -> None:
        """Workers first (each stops its executors), then the master."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        for out in self._logs:
            out.close()
        self.procs, self._logs = [], []
