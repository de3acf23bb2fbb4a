"""Dask DataFrame shuffles through Croupier instead of Dask's own P2P or task shuffle.

Usage::

    import dask.dataframe as dd, croupier.dask
    df = dd.from_pandas(pdf, npartitions=64)
    out = croupier.dask.shuffle(df, on="key", npartitions=64, url="tcp://127.0.0.1:9097")
    out.compute()

or, to unregister the Croupier app (and so delete its shuffle files) when done::

    with croupier.dask.ShuffleService("tcp://127.0.0.1:9097") as svc:
        out = svc.shuffle(df, on="key", npartitions=64)
        result = out.compute()

How it works. At graph construction time the client registers an app and a shuffle
(``num_mappers = df.npartitions``, ``num_partitions = npartitions``) on the master.
The graph then holds

* one *map* task per input partition: it hash-partitions the pandas partition by ``on``
  (``pandas.util.hash_pandas_object(df[on], index=False) % npartitions``, so equal keys
  go to the same output partition) and writes each non-empty piece as ONE record, the
  piece in Arrow IPC stream format (index included), then closes the writer
  (``MapperEnd``). It returns a small ``dict`` (map id, attempt id, ``won``, rows,
  bytes), never the data;
* one *barrier* task depending on every map task, so reduces start after every map;
* one *reduce* task per output partition: it reads the partition, concatenates the
  Arrow tables and returns a pandas DataFrame with the input's columns and dtypes
  (an empty partition is ``df._meta``).

Every task opens its own ``croupier.connect(url)`` client (tasks run in other
processes) and the shuffle by its handle (``Shuffle.handle()``, in the ``ShuffleSpec``:
it carries the app key, so tasks on a cluster with a secret can write and read), and
closes the client before returning.

Attempts. Dask may run a task more than once (retries, a lost worker, recomputing
the result). Each *execution* of a map task uses a fresh random ``attempt_id``; the
master keeps the first attempt of a map to log ``MapperEnd`` and readers drop the
records of every other attempt, so the output is the same however often a map runs.
Recomputing ``out`` after the shuffle committed is fine too: the new map attempts are
superseded and the reduces read the committed data.

Recovery. The reduces also get a ``Lineage``: the input partitions as Dask ``Delayed``
objects, which they do not depend on. A reduce whose read raises ``DataLostError`` (both
copies of some map output gone after the commit) waits until the master names those maps
lost, reruns the master's lost set with ``Shuffle.rerun``, computes those maps' input
partitions again (synchronous scheduler, inside the task), writes them as new attempts and
reads again (``recover``). ``recovery_stats`` reports how many maps were rerun, of how many.

Lifetime. ``shuffle(...)`` does not unregister its app: it lives while tasks use it
(each task sends an app heartbeat) and expires ``app_timeout`` (master setting,
300 s by default) after the last one. ``ShuffleService`` unregisters its app on exit,
which deletes the shuffle data: compute or persist the results inside the block.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import time
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import croupier
from croupier.core.commands import AppHeartbeat
from croupier.core.config import ClientConfig
from croupier.core.errors import Conflict, CroupierError, DataLostError
from croupier.core.replies import AppHeartbeatReply

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

    from croupier._client import App, Client, Shuffle
    from croupier._ports import MasterPort

__all__ = [
    "Lineage",
    "ShuffleService",
    "ShuffleSpec",
    "build_graph",
    "map_partition",
    "new_attempt_id",
    "recover",
    "recovery_stats",
    "reduce_partition",
    "shuffle",
    "unregister",
]

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")  # a record's length prefix (core/batch.py)


@dataclasses.dataclass(frozen=True)
class ShuffleSpec:
    """Everything a map or reduce task needs; small and picklable (shipped with every task).

    Attributes:
        url: the master URL.
        app_id, shuffle_id: the registered shuffle.
        on: the key columns.
        npartitions: output partitions (= the shuffle's ``num_partitions``).
        num_mappers: input partitions (= the shuffle's ``num_mappers``).
        config: the client config every task's client uses (None = defaults).
        handle: the shuffle's ``Shuffle.handle()``, which tasks open it with (it carries the
            app key: left out of ``repr``). None: tasks open it by its ids (a cluster
            without a secret only).
        recover: reduces rerun lost maps from their inputs (``recover``) instead of failing.
        lost_wait: seconds a reduce waits for the master to name the lost maps (it declares
            a dead worker lost after ``--worker-timeout``).
    """

    url: str
    app_id: str
    shuffle_id: int
    on: tuple[str, ...]
    npartitions: int
    num_mappers: int
    config: ClientConfig | None = None
    handle: str | None = dataclasses.field(default=None, repr=False)
    recover: bool = True
    lost_wait: float = 300.0

    def open(self, client: Client) -> Shuffle:
        """The shuffle, opened on ``client`` (by its handle when the spec has one)."""
        if self.handle is not None:
            return client.open_shuffle(self.handle)
        return client.open_shuffle(self.app_id, self.shuffle_id)


class Lineage:
    """The input partitions of a shuffle's maps, as Dask ``Delayed`` objects, so that a reduce
    that finds map output lost can compute exactly those inputs again (``recover``).

    A plain class on purpose: Dask does not look inside it, so the reduces do not depend on
    the inputs (they are computed again only when their map's output is lost).
    """

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)

    def compute(self, map_id: int) -> pd.DataFrame:
        """Input partition ``map_id``, computed again here (Dask's synchronous scheduler)."""
        part: pd.DataFrame = self.parts[map_id].compute(scheduler="sync")
        return part


def _lineage(lineage: Lineage) -> Lineage:
    return lineage


def new_attempt_id() -> int:
    """A fresh attempt id in ``0..2**31-1``, unique per task execution (random 31 bits)."""
    return uuid.uuid4().int & 0x7FFFFFFF


def _heartbeat(master: MasterPort, app_id: str) -> None:
    """Best effort, keep the app alive while its tasks run (``shuffle()`` sends no heartbeats).
    The client signs as the app once it opened the spec's handle."""
    try:
        master.request(AppHeartbeat(app_id), AppHeartbeatReply)
    except CroupierError as exc:
        log.debug("heartbeat of app %s failed: %s", app_id, exc)


def _key_columns(on: str | Sequence[str]) -> tuple[str, ...]:
    cols = (on,) if isinstance(on, str) else tuple(on)
    if not cols:
        raise ValueError("on must name at least one column")
    return cols


def _pieces(part: pd.DataFrame, on: tuple[str, ...], npartitions: int) -> list[tuple[int, int, Any]]:
    """``part``'s non-empty pieces by output partition: ``(partition, rows, framed record)``,
    where the framed record is the piece's Arrow IPC stream behind its u32 length.

    The partition becomes one Arrow table (index included), reordered once by target
    partition with ``take``; each piece is a zero-copy slice of it, written as one IPC
    stream into an Arrow buffer that the writer sends without another copy.
    """
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    if len(part) == 0:
        return []
    keys = part[on[0]] if len(on) == 1 else part[list(on)]
    # below 2**16 partitions the targets fit 16 bits, where numpy's stable sort is a radix sort
    small = npartitions <= 1 << 16
    targets = (pd.util.hash_pandas_object(keys, index=False).to_numpy() % np.uint64(npartitions)).astype(
        np.uint16 if small else np.int64
    )
    order = np.argsort(targets, kind="stable")
    counts = np.bincount(targets, minlength=npartitions)
    table = pa.Table.from_pandas(part, preserve_index=True).take(pa.array(order))
    out = []
    offset = 0
    for j in np.flatnonzero(counts):
        rows = int(counts[j])
        piece = table.slice(offset, rows)
        offset += rows
        # the IPC stream's size first (nothing is copied), then the stream itself written
        # once, behind its u32 length: the writer sends that buffer as it is
        sizer = pa.MockOutputStream()
        with pa.ipc.new_stream(sizer, piece.schema) as stream:
            stream.write_table(piece)
        size = sizer.size()
        framed = pa.allocate_buffer(_LEN.size + size)
        sink = pa.FixedSizeBufferWriter(framed)
        sink.write(_LEN.pack(size))
        with pa.ipc.new_stream(sink, piece.schema) as stream:
            stream.write_table(piece)
        out.append((int(j), rows, framed))
    return out


def map_partition(
    part: pd.DataFrame, map_id: int, spec: ShuffleSpec, *, attempt_id: int | None = None
) -> dict[str, Any]:
    """The map task: write ``part``'s pieces as map ``map_id``; returns a small summary.

    ``attempt_id`` defaults to a fresh ``new_attempt_id()``: give one only in tests.
    The summary is ``{"map_id", "attempt_id", "won", "rows", "bytes"}``; ``won`` is
    False when another attempt of the same map ended first (its records count instead).
    """
    attempt = new_attempt_id() if attempt_id is None else attempt_id
    rows = nbytes = 0
    with croupier.connect(spec.url, config=spec.config) as client:
        sh = spec.open(client)  # first: the client then knows the app's key
        _heartbeat(sh.master, spec.app_id)
        with sh.writer(map_id=map_id, attempt_id=attempt) as writer:
            for j, count, framed in _pieces(part, spec.on, spec.npartitions):
                writer._write_framed(j, memoryview(framed))
                rows += count
                nbytes += framed.size - _LEN.size
        won = bool(writer.won)
    return {"map_id": map_id, "attempt_id": attempt, "won": won, "rows": rows, "bytes": nbytes}


def _barrier(results: list[dict[str, Any]]) -> int:
    """Depends on every map task; returns how many map attempts won."""
    return sum(1 for r in results if r["won"])


def _conform(out: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """``out`` with ``meta``'s column order and dtypes (Arrow may widen, e.g. all-null columns)."""
    out = out[list(meta.columns)]
    wrong = {c: meta.dtypes[c] for c in meta.columns if out.dtypes[c] != meta.dtypes[c]}
    if wrong:
        out = out.astype(wrong)
    if out.index.dtype != meta.index.dtype:
        out.index = out.index.astype(meta.index.dtype)
    out.index.name = meta.index.name
    return out


def reduce_partition(
    partition: int, barrier: int, spec: ShuffleSpec, meta: pd.DataFrame, lineage: Lineage | None = None
) -> pd.DataFrame:
    """The reduce task: ``partition``'s rows as one pandas DataFrame shaped like ``meta``.

    ``barrier`` is only there to depend on the barrier task (every map has ended). With
    ``lineage`` (and ``spec.recover``), a ``DataLostError`` makes the task rerun the lost
    maps from their inputs (``recover``) and read again, up to ``RECOVERY_ROUNDS`` times.
    """
    del barrier
    import pyarrow as pa

    tables: list[Any] = []
    with croupier.connect(spec.url, config=spec.config) as client:
        sh = spec.open(client)  # first: the client then knows the app's key
        _heartbeat(sh.master, spec.app_id)
        for round_ in range(RECOVERY_ROUNDS + 1):
            try:
                tables = _read_tables(sh, partition)
                break
            except DataLostError as exc:
                if lineage is None or not spec.recover or round_ == RECOVERY_ROUNDS or not exc.map_ids:
                    raise
                recover(sh, exc, spec, lineage)
    if not tables:
        return meta.copy()
    table = pa.concat_tables(tables, promote_options="permissive")
    return _conform(table.to_pandas(), meta)


def _read_tables(sh: Shuffle, partition: int) -> list[Any]:
    import pyarrow as pa

    tables = []
    for record in sh.reader(partition).views():  # no copy: Arrow reads the fetched chunks
        with pa.ipc.open_stream(pa.py_buffer(record)) as stream:
            tables.append(stream.read_all())
    return tables


RECOVERY_ROUNDS = 5  # reads after a DataLostError, each after a rerun (others' reruns commit between)


def recover(sh: Shuffle, exc: DataLostError, spec: ShuffleSpec, lineage: Lineage) -> list[int]:
    """Rerun the maps ``exc`` names, from their inputs; returns the maps this call wrote.

    Waits (up to ``spec.lost_wait`` seconds) until the master names them lost too (it
    declares a dead worker lost after its ``--worker-timeout``); maps another reduce has
    rerun since need nothing more. Then ``Shuffle.rerun`` reopens the shuffle for the
    master's whole lost set (not only this partition's) and each of those maps runs again,
    from its input partition, with a new attempt. If another reduce's rerun is under
    way (``CONFLICT``: the shuffle is not committed), nothing is written here: reading
    again waits for that rerun's commit, and a loss left over comes back as a new error.

    Raises:
        DataLostError: ``exc``, when the master never names its maps lost.
    """
    chosen = _wait_until_named(sh, exc, spec)
    if not chosen:
        return []
    try:
        sh.rerun(chosen)
    except Conflict as refused:
        log.info("shuffle %s/%d: rerun of maps %s refused (%s); reading again", *_ids(spec), chosen, refused)
        return []
    for m in chosen:
        map_partition(lineage.compute(m), m, spec)
    stats = recovery_stats(spec)
    log.warning(
        "shuffle %s/%d: data of maps %s was lost; reran them (%d of %d maps rerun so far)",
        *_ids(spec),
        chosen,
        stats["rerun_maps"],
        stats["num_mappers"],
    )
    return chosen


def _wait_until_named(sh: Shuffle, exc: DataLostError, spec: ShuffleSpec) -> list[int]:
    """The maps to rerun once the master names ``exc``'s maps lost (or suspect): every map
    surely lost, and the suspect ones (on restarted workers) this read proved gone. Empty
    when there is nothing to do but read again: a rerun is under way, or another reduce's
    rerun fixed them already.

    Raises:
        DataLostError: ``exc``, when the master does not name them within ``spec.lost_wait``.
    """
    deadline = time.monotonic() + spec.lost_wait
    while True:
        view = sh.lost_maps()
        if not view["committed"]:
            return []  # a rerun is under way: read again once it commits
        lost = {m for _, lo, hi in view["lost"] for m in range(lo, hi)}
        suspect = {m for _, lo, hi in view["suspect"] for m in range(lo, hi)}
        fixed = {m for lo, hi in view["rerun"] for m in range(lo, hi)} - lost - suspect
        pending = set(exc.map_ids) - fixed
        if not pending:
            return []
        if pending <= lost | suspect:
            return sorted(lost | (pending & suspect))
        if time.monotonic() > deadline:
            raise exc
        time.sleep(0.2)


def _ids(spec: ShuffleSpec) -> tuple[str, int]:
    return spec.app_id, spec.shuffle_id


def recovery_stats(spec: ShuffleSpec) -> dict[str, int]:
    """How many of the shuffle's maps were ever rerun after a loss, out of how many:
    ``{"rerun_maps": k, "num_mappers": n, "lost_maps": maps lost and not rerun yet}``."""
    with croupier.connect(spec.url, config=spec.config) as client:
        view = client.open_shuffle(spec.app_id, spec.shuffle_id).lost_maps()
    lost = {m for _, lo, hi in view["lost"] for m in range(lo, hi)}
    return {
        "rerun_maps": sum(hi - lo for lo, hi in view["rerun"]),
        "num_mappers": int(view["num_mappers"]),
        "lost_maps": len(lost),
    }


def build_graph(df: dd.DataFrame, spec: ShuffleSpec) -> dd.DataFrame:
    """The shuffled DataFrame for a registered shuffle: maps -> barrier -> reduces."""
    import dask.dataframe as dd
    from dask.delayed import delayed

    if df.npartitions != spec.num_mappers:
        raise ValueError(f"df has {df.npartitions} partitions, the shuffle {spec.num_mappers} mappers")
    meta = df._meta
    frame: Any = df  # dask's to_delayed is untyped
    parts = frame.to_delayed()
    maps = [
        delayed(map_partition, pure=False)(
            part, i, spec, dask_key_name=f"croupier-map-{spec.app_id}-{spec.shuffle_id}-{i}"
        )
        for i, part in enumerate(parts)
    ]
    barrier = delayed(_barrier, pure=False)(
        maps, dask_key_name=f"croupier-barrier-{spec.app_id}-{spec.shuffle_id}"
    )
    lineage = delayed(_lineage, pure=False)(
        Lineage(parts), dask_key_name=f"croupier-lineage-{spec.app_id}-{spec.shuffle_id}"
    )
    reduces = [
        delayed(reduce_partition, pure=False)(
            j,
            barrier,
            spec,
            meta,
            lineage,
            dask_key_name=f"croupier-reduce-{spec.app_id}-{spec.shuffle_id}-{j}",
        )
        for j in range(spec.npartitions)
    ]
    out: dd.DataFrame = dd.from_delayed(reduces, meta=meta, verify_meta=False)
    return out


def _register(
    app: App,
    url: str,
    df: dd.DataFrame,
    on: str | Sequence[str],
    npartitions: int | None,
    replicate: bool,
    config: ClientConfig | None,
) -> ShuffleSpec:
    cols = _key_columns(on)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise KeyError(f"no such column(s) {missing}; the columns are {list(df.columns)}")
    n_out = df.npartitions if npartitions is None else int(npartitions)
    if n_out < 1:
        raise ValueError(f"npartitions must be >= 1, not {n_out}")
    sh = app.register_shuffle(num_mappers=df.npartitions, num_partitions=n_out, replicate=replicate)
    return ShuffleSpec(url, sh.app_id, sh.shuffle_id, cols, n_out, df.npartitions, config, sh.handle())


def shuffle(
    df: dd.DataFrame,
    on: str | list[str],
    npartitions: int | None = None,
    *,
    url: str,
    app_name: str = "dask",
    replicate: bool = True,
    config: ClientConfig | None = None,
) -> dd.DataFrame:
    """``df`` hash-partitioned by ``on`` into ``npartitions`` (default: as many as ``df``).

    Registers a new app named ``app_name`` and a shuffle on the master at ``url``
    now; the data moves when the result is computed. The app is not unregistered:
    it expires ``app_timeout`` after the last task (see the module docstring). Use
    ``ShuffleService`` to unregister it (and delete the data) at a known point.

    Raises:
        KeyError: a column of ``on`` is missing.
        ValueError: ``npartitions < 1``.
        CroupierError: the master refused or could not be reached.
    """
    with croupier.connect(url, config=config) as client:
        app = client.register_app(app_name)
        spec = _register(app, url, df, on, npartitions, replicate, config)
    return build_graph(df, spec)


def unregister(url: str, app_id: str, *, config: ClientConfig | None = None) -> None:
    """Unregister app ``app_id`` (its shuffles' files are deleted). On a cluster with a secret,
    pass the handle of one of its shuffles (``ShuffleSpec.handle``) instead: it carries the key."""
    from croupier._client import HANDLE_PREFIX, parse_handle

    with croupier.connect(url, config=config) as client:
        if app_id.startswith(f"{HANDLE_PREFIX}:"):
            app_id, _, key = parse_handle(app_id)
            client._learn_key(app_id, key)
        client.unregister_app(app_id)


class ShuffleService:
    """One Croupier app for many Dask shuffles; leaving the ``with`` block unregisters it.

    Usage::

        with croupier.dask.ShuffleService("tcp://127.0.0.1:9097") as svc:
            out = svc.shuffle(df, on="key", npartitions=64)
            out.compute()

    Parameters:
        url: the master URL.
        app_name: the app's name.
        replicate: default of ``shuffle(replicate=...)``.
        config: client config, used here and by every task.

    Attributes:
        app_id: the registered app (after ``open``/``__enter__``).
        specs: the shuffles registered so far.
    """

    def __init__(
        self, url: str, *, app_name: str = "dask", replicate: bool = True, config: ClientConfig | None = None
    ) -> None:
        self.url = url
        self.app_name = app_name
        self.replicate = replicate
        self.config = config
        self.specs: list[ShuffleSpec] = []
        self._client: Client | None = None
        self._app: App | None = None

    def open(self) -> Self:
        """Connect and register the app (heartbeats run until ``close``). Idempotent."""
        if self._app is None:
            client = croupier.connect(self.url, config=self.config)
            try:
                self._app = client.register_app(self.app_name)
            except BaseException:
                client.close()
                raise
            self._client = client
        return self

    @property
    def app_id(self) -> str:
        if self._app is None:
            raise RuntimeError("the service is not open")
        return self._app.app_id

    def register(
        self,
        df: dd.DataFrame,
        on: str | list[str],
        npartitions: int | None = None,
        *,
        replicate: bool | None = None,
    ) -> ShuffleSpec:
        """Register a shuffle for ``df`` without building its graph (see ``build_graph``)."""
        self.open()
        assert self._app is not None
        spec = _register(
            self._app,
            self.url,
            df,
            on,
            npartitions,
            self.replicate if replicate is None else replicate,
            self.config,
        )
        self.specs.append(spec)
        return spec

    def shuffle(
        self,
        df: dd.DataFrame,
        on: str | list[str],
        npartitions: int | None = None,
        *,
        replicate: bool | None = None,
    ) -> dd.DataFrame:
        """Like ``croupier.dask.shuffle``, in this service's app."""
        return build_graph(df, self.register(df, on, npartitions, replicate=replicate))

    def recovery_stats(self) -> list[dict[str, int]]:
        """``croupier.dask.recovery_stats`` of each shuffle registered so far, in order."""
        return [recovery_stats(spec) for spec in self.specs]

    def close(self) -> None:
        """Unregister the app (deleting every shuffle's data) and disconnect. Idempotent."""
        app, client = self._app, self._client
        self._app = self._client = None
        try:
            if app is not None:
                app.unregister()
        finally:
            if client is not None:
                client.close()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
