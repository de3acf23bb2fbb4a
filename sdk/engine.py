"""A small map-reduce engine on Croupier: executor processes that exit after their task.

Usage::

    import croupier.engine

    def words(line):
        for word in line.split():
            yield word, 1

    if __name__ == "__main__":  # executors are spawned: the main module is imported again
        counts = croupier.engine.map_reduce(lines, words, lambda word, ones: sum(ones))

How it runs. ``map_reduce`` splits the inputs into ``num_maps`` slices of consecutive items
(default ``MAPS_PER_EXECUTOR * executors``, never more than there are items; sizes differ by
at most one), as Spark's ``parallelize`` or Dask's ``from_sequence`` make partitions, and
registers an app and one shuffle (``num_mappers`` = the number of slices) on the cluster at
``url``, or on an embedded one it starts (``LocalCluster`` with worker processes, stopped at
the end). Then, with at most ``executors`` processes alive at a time:

* one **map task** per slice, in a fresh process (``multiprocessing``, spawn): it opens
  the shuffle by its handle, writes every ``(key, value)`` that ``map_fn(item)`` yields for
  each item of its slice to partition ``partition_of(key, num_partitions)``, closes its
  writer (``MapperEnd``) and exits;
* once **every mapper process has exited** (as under dynamic allocation: the map output lives
  on the Croupier workers, not in the executors), ``reducers`` **reduce tasks**, each a fresh
  process too: task ``r`` reads partitions ``r, r + reducers, ...``, groups the values by key
  and returns ``{key: reduce_fn(key, values)}``. ``map_reduce`` merges these dicts.

The app is unregistered at the end (its shuffle files are deleted), also on failure.

Shipping. The functions and the input items travel to the executors with ``cloudpickle``
(lambdas and closures too); so do the results, back. Records are ``pickle`` (protocol 5) of
``(key, value)``, or ``cloudpickle`` when pickle cannot take a value; they are unpickled by
reduce tasks only. The Croupier servers move them as opaque bytes and never unpickle
anything (DESIGN §9).

Keys. A key's partition is ``zlib.crc32(canonical bytes of the key) % num_partitions``,
stable across processes and runs (Python's ``hash`` of a str is salted per process, so it
cannot be used). Supported keys: ``str``, ``bytes``, ``int``, ``bool``, ``float``, ``None``
and tuples of these, nested. Keys that compare equal get the same bytes (``True``, ``1`` and
``1.0`` alike), so they meet in one reduce call. Any other key fails its map task with a
``TypeError`` naming the type.

Attempts. A task that raises or whose process dies is run again in a new process, up to
``task_attempts`` times; a map's new attempt writes with a new ``attempt_id`` and the first
attempt to end wins, so the output is the same. After the last attempt ``map_reduce``
raises :class:`TaskFailed` with the task's remote traceback, the task's exception (when it
could be unpickled here, a ``CroupierError`` with its ``details``) as its ``__cause__``.

Lost map output. A reduce task reads all its partitions, then raises one ``DataLostError``
naming every lost ``(map, partition)`` (a double fault after the commit); it is not retried:
``map_reduce`` asks ``Shuffle.rerun`` to reopen exactly the maps it names, runs new
attempts of them (attempt ids no earlier round used), and runs the failed reduce tasks
again, up to ``recoveries`` rounds; it logs how many maps it recomputed, out of how many.
Without ``Shuffle.rerun`` in the SDK, or with ``recoveries=0``, the ``TaskFailed`` is raised.

``reduce_fn`` gets the values of one key as a list in no particular order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import pickle
import struct
import time
import traceback
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, cast

import cloudpickle  # type: ignore[import-untyped]

import croupier
from croupier.core.config import ClientConfig
from croupier.core.errors import Unavailable

__all__ = ["MAPS_PER_EXECUTOR", "TaskEvent", "TaskFailed", "map_reduce", "partition_of"]

log = logging.getLogger(__name__)

MAPS_PER_EXECUTOR = 4  # map tasks per executor by default: a lost task costs a quarter of its share

_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")


class TaskFailed(Exception):
    """A map or reduce task failed on its last attempt.

    Attributes:
        kind: ``"map"`` or ``"reduce"``.
        index: the map id, or the reduce task's number.
        attempts: how many attempts ran.
        remote_traceback: the task's traceback as text ("" when its process died silently).
    """

    def __init__(self, kind: str, index: int, attempts: int, reason: str, remote_traceback: str = "") -> None:
        tries = f"{attempts} attempt" + ("s" if attempts != 1 else "")
        text = f"{kind} task {index} failed after {tries}: {reason}"
        if remote_traceback:
            text += f"\n\nThe executor's traceback:\n{remote_traceback}"
        super().__init__(text)
        self.kind = kind
        self.index = index
        self.attempts = attempts
        self.reason = reason
        self.remote_traceback = remote_traceback

    @property
    def lost_maps(self) -> list[int]:
        """The maps whose output a reduce task found lost (``DataLostError`` details), sorted."""
        cause = self.__cause__
        if not isinstance(cause, croupier.DataLostError):
            return []
        pairs = cause.details.get("maps") or []
        return sorted({int(pair[0]) for pair in pairs})


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """What ``on_task`` is told: an executor process started (``exitcode`` None) or exited.

    ``time`` is ``time.time()`` in the driver when it saw the start, or reaped the process.
    """

    kind: str
    index: int
    attempt: int
    pid: int
    event: str  # "start" | "exit"
    time: float
    exitcode: int | None = None


# -- keys and records -------------------------------------------------------------------------


def _encode_key(key: Any, out: bytearray) -> None:
    """Append the canonical bytes of ``key``; keys that compare equal encode the same."""
    if key is None:
        out += b"N"
    elif isinstance(key, int) or (isinstance(key, float) and key.is_integer()):
        text = str(int(key)).encode()
        out += b"i" + _U32.pack(len(text)) + text
    elif isinstance(key, float):
        out += b"f" + _F64.pack(key)
    elif isinstance(key, str):
        data = key.encode("utf-8", "surrogatepass")
        out += b"s" + _U32.pack(len(data)) + data
    elif isinstance(key, bytes):
        out += b"b" + _U32.pack(len(key)) + key
    elif isinstance(key, tuple):
        out += b"t" + _U32.pack(len(key))
        for item in key:
            _encode_key(item, out)
    else:
        raise TypeError(
            "map_reduce keys are str, bytes, int, bool, float, None or tuples of them"
            f" (a stable hash is needed across processes); got {type(key).__name__}"
        )


def partition_of(key: Any, num_partitions: int) -> int:
    """The partition of ``key``: crc32 of its canonical bytes, modulo ``num_partitions``.

    Raises:
        TypeError: an unsupported key type (see the module docstring).
    """
    out = bytearray()
    _encode_key(key, out)
    return zlib.crc32(out) % num_partitions


def _dump_record(key: Any, value: Any) -> bytes:
    try:
        return pickle.dumps((key, value), protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        return bytes(cloudpickle.dumps((key, value), protocol=5))


# -- tasks (they run in the executors) ---------------------------------------------------------


@dataclass
class _Task:
    kind: str
    index: int
    url: str
    config: ClientConfig
    handle: str
    fn: Callable[..., Any]
    items: tuple[Any, ...] = ()  # a map's slice of the inputs
    partitions: tuple[int, ...] = ()  # a reduce's partitions
    attempt: int = 0
    first_attempt: int = 0  # retries count from here (a map recomputed after a loss starts higher)

    def run(self) -> Any:
        with croupier.connect(self.url, config=self.config) as client:
            shuffle = client.open_shuffle(self.handle)
            if self.kind == "map":
                return self._map(shuffle)
            return self._reduce(shuffle)

    def _map(self, shuffle: croupier.Shuffle) -> int:
        n = shuffle.num_partitions
        records = 0
        with shuffle.writer(self.index, self.attempt) as writer:
            for item in self.items:
                for key, value in self.fn(item):
                    writer.write(partition_of(key, n), _dump_record(key, value))
                    records += 1
        return records

    def _reduce(self, shuffle: croupier.Shuffle) -> dict[Any, Any]:
        """Reduce every partition; one partition's lost data does not stop the others being
        read, so that the ``DataLostError`` raised at the end names every lost map."""
        results: dict[Any, Any] = {}
        lost: list[croupier.DataLostError] = []
        for reader in shuffle.readers(self.partitions):
            groups: dict[Any, list[Any]] = {}
            try:
                for record in reader:
                    key, value = pickle.loads(record)
                    groups.setdefault(key, []).append(value)
            except croupier.DataLostError as exc:
                lost.append(exc)
                continue
            for key, values in groups.items():
                results[key] = self.fn(key, values)
        if len(lost) == 1:
            raise lost[0]
        if lost:
            raise croupier.DataLostError.of(
                [p for exc in lost for p in exc.details.get("partitions", [])],
                [w for exc in lost for w in exc.details.get("workers", [])],
                f"reduce task {self.index}",
                maps=[pair for exc in lost for pair in exc.details.get("maps", [])],
            )
        return results


def _executor_main(payload: bytes, conn: Connection) -> None:
    """An executor process: run one task, send back ``("ok", result)`` or an error, exit."""
    try:
        task: _Task = pickle.loads(payload)
        message: tuple[Any, ...] = ("ok", task.run())
        data = cloudpickle.dumps(message, protocol=5)
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"
        try:
            cause: bytes | None = cloudpickle.dumps(exc, protocol=5)
        except Exception:
            cause = None
        details = getattr(exc, "details", None)  # a CroupierError's (exceptions pickle their args only)
        details = details if isinstance(details, dict) else None
        data = cloudpickle.dumps(("error", reason, traceback.format_exc(), cause, details), protocol=5)
    try:
        conn.send_bytes(data)
    finally:
        conn.close()


# -- the driver --------------------------------------------------------------------------------


@dataclass
class _Running:
    task: _Task
    process: BaseProcess
    conn: Connection
    message: tuple[Any, ...] | None = None
    eof: bool = False


@dataclass
class _Executors:
    """Runs tasks in fresh spawned processes, at most ``limit`` alive at a time."""

    limit: int
    attempts: int
    on_task: Callable[[TaskEvent], None] | None
    running: list[_Running] = field(default_factory=list)

    def run(
        self, tasks: list[_Task], tolerate: Callable[[TaskFailed], bool] = lambda _: False
    ) -> tuple[dict[int, Any], dict[int, TaskFailed]]:
        """Every task's result by index, and the failures ``tolerate`` accepted; returns once
        each of their processes has exited.

        Raises:
            TaskFailed: a task failed ``attempts`` times and ``tolerate`` refused it (the
                others are terminated).
        """
        pending = deque(tasks)
        results: dict[int, Any] = {}
        failed: dict[int, TaskFailed] = {}
        try:
            while pending or self.running:
                while pending and len(self.running) < self.limit:
                    self._start(pending.popleft())
                for done in self._wait():
                    try:
                        retry = self._finish(done, results)
                    except TaskFailed as exc:
                        if not tolerate(exc):
                            raise
                        failed[exc.index] = exc
                        continue
                    if retry is not None:
                        pending.append(retry)
        finally:
            self._terminate()
        return results, failed

    def _start(self, task: _Task) -> None:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=False)
        payload = cloudpickle.dumps(task, protocol=5)
        process = ctx.Process(
            target=_executor_main, args=(payload, theirs), name=f"croupier-{task.kind}-{task.index}"
        )
        process.start()
        theirs.close()
        self.running.append(_Running(task, process, ours))
        self._tell(task, "start", process)

    def _wait(self) -> list[_Running]:
        """The running tasks whose process exited (their message read, if they sent one)."""
        by_conn = {id(r.conn): r for r in self.running if r.message is None and not r.eof}
        by_sentinel = {r.process.sentinel: r for r in self.running}
        ready = wait([r.conn for r in by_conn.values()] + list(by_sentinel))
        for obj in ready:
            if isinstance(obj, Connection):
                self._read(by_conn[id(obj)])
        finished = []
        for running in self.running:
            if running.process.sentinel in ready:
                running.process.join()
                self._read(running)
                finished.append(running)
        return finished

    @staticmethod
    def _read(running: _Running) -> None:
        """Read the task's one message if it is there; ``eof`` once it never will be."""
        if running.message is not None or running.eof:
            return
        try:
            if running.conn.poll():
                running.message = pickle.loads(running.conn.recv_bytes())
            elif not running.process.is_alive():
                running.eof = True
        except (EOFError, OSError):
            running.eof = True

    def _finish(self, running: _Running, results: dict[int, Any]) -> _Task | None:
        """Record a finished task; the task to run again, if it failed and may."""
        self.running.remove(running)
        running.conn.close()
        task, code = running.task, running.process.exitcode
        self._tell(task, "exit", running.process)
        message = running.message
        if message is not None and message[0] == "ok" and code == 0:
            results[task.index] = message[1]
            return None
        tries = task.attempt - task.first_attempt + 1
        failure = TaskFailed(
            task.kind,
            task.index,
            tries,
            f"its executor process (pid {running.process.pid}) exited with code {code} and no result",
        )
        if message is not None and message[0] == "error":
            _, reason, remote, cause, details = message
            failure = TaskFailed(task.kind, task.index, tries, reason, remote)
            failure.__cause__ = _unpickled(cause, details)
        # lost map output stays lost however often a reduce reads it: no retry, recompute it
        if tries < self.attempts and not failure.lost_maps:
            return dataclasses.replace(task, attempt=task.attempt + 1)
        raise failure

    def _tell(self, task: _Task, event: str, process: BaseProcess) -> None:
        if self.on_task is not None:
            pid = process.pid or 0
            code = process.exitcode if event == "exit" else None
            self.on_task(TaskEvent(task.kind, task.index, task.attempt, pid, event, time.time(), code))

    def _terminate(self) -> None:
        """End the processes this object started that still run (after a failure)."""
        for running in self.running:
            if running.process.is_alive():
                running.process.terminate()
            running.process.join()
            running.conn.close()
        self.running.clear()


def _unpickled(data: bytes | None, details: dict[str, Any] | None) -> BaseException | None:
    """The task's exception, its ``details`` restored; None if it cannot be unpickled here."""
    if data is None:
        return None
    try:
        exc = pickle.loads(data)
    except Exception:
        return None
    if isinstance(exc, croupier.CroupierError) and details is not None:
        exc.details = details
    return exc if isinstance(exc, BaseException) else None


@contextlib.contextmanager
def _cluster(url: str | None, workers: int) -> Iterator[str]:
    """``url``, or the URL of an embedded cluster of worker processes stopped on exit."""
    if url is not None:
        yield url
        return
    # The SDK never imports the services (DESIGN §3): the embedded cluster is found through
    # the entry point that installs it (croupier.services.local.embedded_cluster).
    from importlib.metadata import entry_points

    found = entry_points(group="croupier.clusters", name="local")
    if not found:
        raise Unavailable("no embedded cluster is installed (entry point croupier.clusters:local): give url=")
    with next(iter(found)).load()(workers) as master:
        yield str(master)


def map_reduce(
    inputs: Iterable[Any],
    map_fn: Callable[[Any], Iterable[tuple[Any, Any]]],
    reduce_fn: Callable[[Any, list[Any]], Any],
    num_partitions: int = 8,
    executors: int = 2,
    url: str | None = None,
    *,
    reducers: int | None = None,
    task_attempts: int = 2,
    workers: int = 2,
    config: ClientConfig | None = None,
    app_name: str = "map-reduce",
    on_task: Callable[[TaskEvent], None] | None = None,
    recoveries: int = 2,
    num_maps: int | None = None,
) -> dict[Any, Any]:
    """``{key: reduce_fn(key, values)}`` over every ``(key, value)`` that ``map_fn`` yields
    for the items of ``inputs`` (see the module docstring).

    Parameters:
        inputs: the items (materialized first), split into ``num_maps`` map tasks.
        map_fn: ``item -> iterable of (key, value)``; keys as the module docstring says.
        reduce_fn: ``(key, values) -> result``.
        num_partitions: the shuffle's partitions.
        executors: executor processes alive at most at a time.
        url: a Croupier master; None starts an embedded cluster of ``workers`` worker processes.
        reducers: reduce tasks (default ``min(executors, num_partitions)``).
        task_attempts: attempts per task before ``TaskFailed``.
        config: the client settings of the driver and the executors.
        app_name: the Croupier app's name.
        on_task: called in the driver with a ``TaskEvent`` when an executor starts and exits.
        recoveries: rounds of recomputing map output lost after the commit (a reduce task's
            ``DataLostError``) through ``Shuffle.rerun``, where the SDK has it; 0 = raise.
        num_maps: map tasks, each a slice of consecutive items (default 4 per executor).

    Raises:
        ValueError: a size below 1.
        TaskFailed: a task failed on every attempt.
        CroupierError: the cluster refused or could not be reached.
    """
    items = list(inputs)
    reduce_tasks, maps = _sizes(num_partitions, executors, reducers, task_attempts, workers, num_maps)
    if not items:
        return {}
    slices = _split(items, maps)
    config = config or ClientConfig()
    with _cluster(url, workers) as master, croupier.connect(master, config=config) as client:
        app = client.register_app(app_name)
        try:
            shuffle = app.register_shuffle(num_mappers=len(slices), num_partitions=num_partitions)
            pool = _Executors(executors, task_attempts, on_task)
            job = _Job(master, config, shuffle, slices, map_fn, reduce_fn, pool, recoveries)
            groups = [tuple(range(r, num_partitions, reduce_tasks)) for r in range(reduce_tasks)]
            parts = job.run(groups)
        finally:
            with contextlib.suppress(croupier.CroupierError):
                app.unregister()
    return dict(itertools.chain.from_iterable(p.items() for p in parts.values()))


def _sizes(
    num_partitions: int,
    executors: int,
    reducers: int | None,
    attempts: int,
    workers: int,
    num_maps: int | None,
) -> tuple[int, int]:
    """``(reduce tasks, map tasks)``, their defaults applied.

    Raises:
        ValueError: a size below 1.
    """
    reduce_tasks = reducers if reducers is not None else min(executors, num_partitions)
    maps = num_maps if num_maps is not None else MAPS_PER_EXECUTOR * executors
    if min(num_partitions, executors, reduce_tasks, attempts, workers, maps) < 1:
        raise ValueError(
            "num_partitions, executors, reducers, task_attempts, workers and num_maps must be >= 1"
        )
    return reduce_tasks, maps


def _split(items: list[Any], tasks: int) -> list[tuple[Any, ...]]:
    """``items`` as ``min(tasks, len(items))`` slices of consecutive items, sizes within one."""
    n = min(tasks, len(items))
    return [tuple(items[i * len(items) // n : (i + 1) * len(items) // n]) for i in range(n)]


@dataclass
class _Job:
    """One ``map_reduce``: its tasks, and the recomputation of map output lost after the commit."""

    master: str
    config: ClientConfig
    shuffle: croupier.Shuffle
    slices: list[tuple[Any, ...]]  # map task i's items
    map_fn: Callable[..., Any]
    reduce_fn: Callable[..., Any]
    pool: _Executors
    recoveries: int
    recomputed: int = 0

    def task(self, kind: str, index: int, **extra: Any) -> _Task:
        fn = self.map_fn if kind == "map" else self.reduce_fn
        return _Task(kind, index, self.master, self.config, self.shuffle.handle(), fn, **extra)

    def run(self, groups: list[tuple[int, ...]]) -> dict[int, Any]:
        """The reduce tasks' results by task number, after every map task ran."""
        self.pool.run([self.task("map", i, items=part) for i, part in enumerate(self.slices)])
        todo = list(range(len(groups)))
        out: dict[int, Any] = {}
        for round_ in range(self.recoveries + 1):
            may_recover = round_ < self.recoveries and getattr(self.shuffle, "rerun", None) is not None
            tasks = [self.task("reduce", r, partitions=groups[r]) for r in todo]
            done, failed = self.pool.run(tasks, _lost_output if may_recover else _never)
            out.update(done)
            if not failed:
                break
            self._recompute(failed, round_ + 1)
            todo = sorted(failed)
        return out

    def _recompute(self, failed: dict[int, TaskFailed], round_: int) -> None:
        """New attempts of the maps whose output the failed reduce tasks found lost."""
        lost = sorted({m for failure in failed.values() for m in failure.lost_maps})
        log.warning(
            "%s: recomputing %d of %d maps whose output was lost after the commit (round %d)",
            self.shuffle,
            len(lost),
            len(self.slices),
            round_,
        )
        cast(Any, self.shuffle).rerun(lost)  # Shuffle.rerun: issue 16 item 2
        first = round_ * self.pool.attempts  # attempt ids no earlier round used
        self.pool.run(
            [self.task("map", m, items=self.slices[m], attempt=first, first_attempt=first) for m in lost]
        )
        self.recomputed += len(lost)


def _lost_output(failure: TaskFailed) -> bool:
    return failure.kind == "reduce" and bool(failure.lost_maps)


def _never(failure: TaskFailed) -> bool:
    return False
