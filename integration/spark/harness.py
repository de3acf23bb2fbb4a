"""The Spark suite's harness: a Spark driver in a child process (``driver.py``) and the Spark
settings the suite and the side-by-side bench run with."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from croupier.services.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    for tool in ("java", "javac", "jar"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (a JDK 17 is needed)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[test]')"
    return None


def jvm_tmp_env(tmp: Path) -> dict[str, str]:
    """``os.environ`` with ``tmp`` (created) as the temporary directory of every JVM and Python
    process started under it."""
    tmp.mkdir(parents=True, exist_ok=True)
    options = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={tmp}".strip()
    return {**os.environ, "TMPDIR": str(tmp), "JAVA_TOOL_OPTIONS": options}


class Driver:
    """A ``driver.py`` child process: one SparkSession, queries on request."""

    def __init__(self, conf: dict[str, str], log: Path) -> None:
        self.log_path = log
        # the JVMs' temporary files (lz4-java extracts its native library per JVM) go beside
        # the log, with the test's directory, not into /tmp for ever
        self.tmp = log.parent / "tmp"
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        # inherited by the driver's JVM, the local-cluster's workers and their executors
        env = {**jvm_tmp_env(self.tmp), "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "integration.spark.driver", json.dumps(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            env=env,
            text=True,
        )
        self.app_id = ""

    def wait_ready(self) -> None:
        """Wait for the SparkSession (~15 s on a quiet machine; both drivers start in parallel)."""
        ready = self._read()
        if not ready.get("ready"):
            self.stop()
            raise RuntimeError(f"the Spark driver did not start: {ready}\n{self.log_tail()}")
        self.app_id = ready["app_id"]

    def _read(self) -> dict[str, Any]:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            return {"ok": False, "error": f"the driver exited ({self.popen.poll()})"}
        return dict(json.loads(line))

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def run(self, op: str, **args: Any) -> Any:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.popen.stdin.flush()
        reply = self._read()
        if not reply.get("ok"):
            raise AssertionError(f"{op} failed: {reply.get('error')}\n--- driver log ---\n{self.log_tail()}")
        return reply["result"]

    def executor_pids(self) -> list[int]:
        """The executor JVMs of this app (children of the local-cluster's workers)."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            text = [c.decode(errors="replace") for c in cmd]
            # two local-clusters started in the same second give their apps the same id:
            # only the executors this driver's process tree started are its own
            executor = any("CoarseGrainedExecutorBackend" in c for c in text) and self.app_id in text
            if executor and _descends_from(int(entry), self.popen.pid):
                pids.append(int(entry))
        return sorted(pids)

    def stop(self) -> None:
        if self.popen.poll() is None:
            assert self.popen.stdin is not None
            try:
                self.popen.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.popen.stdin.close()
                self.popen.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.popen.kill()
                self.popen.wait(timeout=30)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self._log.close()


def spark_conf(**extra: str) -> dict[str, str]:
    return {
        "spark.master": "local-cluster[2,1,1024]",
        "spark.app.name": "croupier-spark-suite",
        "spark.executor.memory": "900m",
        "spark.driver.memory": "1g",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.adaptive.skewJoin.enabled": "true",
        "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": "64k",
        "spark.sql.adaptive.skewJoin.skewedPartitionFactor": "2",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64k",
        "spark.sql.adaptive.coalescePartitions.minPartitionSize": "1k",
        "spark.default.parallelism": "8",
        "spark.python.worker.reuse": "true",
        # the JVM waits this long for the driver's Python to connect to a collect()'s local
        # socket (default 15 s): a loaded CI run failed two queries there (refused / reset)
        "spark.python.authenticate.socketTimeout": "120s",
        "spark.speculation": "true",
        "spark.speculation.minTaskRuntime": "4s",
        "spark.speculation.multiplier": "3",
        "spark.speculation.quantile": "0.5",
        **extra,
    }


def croupier_app(cluster: LocalCluster, driver: Driver) -> str:
    """The Croupier app id the driver's shuffle manager registered."""
    apps = [
        a["app_id"] for a in cluster.status()["apps"] if a["app_id"].startswith(f"spark-{driver.app_id}-")
    ]
    assert len(apps) == 1, cluster.status()["apps"]
    return str(apps[0])


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is ``pid`` or one of its ancestors (read from ``/proc``)."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state is the ppid
    return False


def jvms_of(driver: Driver) -> list[int]:
    """The JVMs in a driver's process tree: its own, the local-cluster's workers, the executors."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == driver.popen.pid:
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue
        if os.path.basename(exe) == "java" and _descends_from(int(entry), driver.popen.pid):
            pids.append(int(entry))
    return sorted(pids)
