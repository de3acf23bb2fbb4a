"""Croupier: a remote shuffle service. The public SDK.

Kept light on purpose: every ``import croupier.core`` runs this file first, so
the SDK's names are exported lazily (no zmq or blake3 until one is used).

Where the rest of the client lives: the master client, the RPC clients and batch digests in
``transports/``; the wire format in ``core/``; the Spark shuffle manager's JVM side in
``clients/jvm/`` (built by ``croupier.spark``). The SDK imports only ``core`` and
``transports`` (DESIGN §3): the embedded cluster of ``croupier.engine`` and the ZooKeeper
leader lookup are found through entry points (pyproject.toml).

Usage::

    import croupier

    with croupier.connect("tcp://127.0.0.1:9097") as client:
        app = client.register_app("etl-nightly")
        sh = app.register_shuffle(num_mappers=4, num_partitions=16)
        with sh.writer(map_id=0, attempt_id=0) as w:
            w.write(3, b"one record")
        for record in sh.reader(3):
            ...
        app.unregister()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from croupier._client import App, Client, Shuffle, connect
    from croupier._reader import Reader
    from croupier._writer import Writer
    from croupier.core.config import ClientConfig
    from croupier.core.errors import (
        BadRequest,
        Conflict,
        CroupierError,
        DataLostError,
        InternalError,
        NotCommitted,
        NotEnoughWorkers,
        QuotaExceeded,
        Unauthorized,
        UnknownApp,
        UnknownShuffle,
    )

# the errors are those the public methods' docstrings say they raise
__all__ = [
    "App",
    "BadRequest",
    "Client",
    "ClientConfig",
    "Conflict",
    "CroupierError",
    "DataLostError",
    "InternalError",
    "NotCommitted",
    "NotEnoughWorkers",
    "QuotaExceeded",
    "Reader",
    "Shuffle",
    "Unauthorized",
    "UnknownApp",
    "UnknownShuffle",
    "Writer",
    "connect",
]
__version__ = "0.1.0"

_EXPORTS = {
    "App": "croupier._client",
    "Client": "croupier._client",
    "Shuffle": "croupier._client",
    "connect": "croupier._client",
    "Reader": "croupier._reader",
    "Writer": "croupier._writer",
    "ClientConfig": "croupier.core.config",
    **{
        name: "croupier.core.errors"
        for name in (
            "BadRequest",
            "Conflict",
            "CroupierError",
            "DataLostError",
            "InternalError",
            "NotCommitted",
            "NotEnoughWorkers",
            "QuotaExceeded",
            "Unauthorized",
            "UnknownApp",
            "UnknownShuffle",
        )
    },
}


# submodules loaded on first use: ``croupier.engine`` after a bare ``import croupier``
_SUBMODULES = frozenset({"engine"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"croupier.{name}")  # the import binds it here
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'croupier' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
