"""The OpenAPI 3 document of ``/api/v1`` (served at ``/api/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

__all__ = ["PATHS", "openapi_document"]

_OBJ: dict[str, Any] = {"type": "object", "additionalProperties": True}
_LIST: dict[str, Any] = {"type": "array", "items": _OBJ}

# path -> (summary, who serves it, response schema)
PATHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "/api/v1/cluster": ("Role, term, seq, counts, tenants and log append latency", "master", _OBJ),
    "/api/v1/workers": ("STATUS's workers, with http_port, heartbeat_age and load", "master", _LIST),
    "/api/v1/apps": ("STATUS's apps", "master", _LIST),
    "/api/v1/shuffles": ("STATUS's shuffles (progress: mappers_ended of num_mappers)", "master", _LIST),
    "/api/v1/shuffles/{app_id}/{shuffle_id}": (
        "One shuffle: state, winners, partitions with their epochs and copies, lost copies, sizes",
        "master",
        _OBJ,
    ),
    "/api/v1/history": (
        "Throughput over the last minutes, recent events, each worker's figures",
        "master",
        _OBJ,
    ),
    "/api/v1/worker": ("This worker: memory, locations, bytes, latency quantiles, dirs", "worker", _OBJ),
}


def _operation(path: str, summary: str, who: str, schema: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "tags": [who],
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": schema}}},
        },
    }
    if who == "master":
        op["responses"]["307"] = {"description": "a follower: the same path on the leader"}
        op["responses"]["503"] = {"description": "a follower that does not know the leader (NOT_LEADER)"}
    params = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
    if params:
        op["parameters"] = [
            {
                "name": p,
                "in": "path",
                "required": True,
                "schema": {"type": "integer" if p == "shuffle_id" else "string"},
            }
            for p in params
        ]
        op["responses"]["404"] = {"description": "no such shuffle (UNKNOWN_SHUFFLE)"}
    return op


def openapi_document() -> dict[str, Any]:
    """The document: every path of ``PATHS`` as a read-only GET."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Croupier REST API",
            "version": "1",
            "description": "Read-only JSON about a Croupier cluster, built from the leader's STATUS. "
            "No credentials: bind --http to an address only operators reach.",
        },
        "paths": {path: {"get": _operation(path, *spec)} for path, spec in PATHS.items()},
    }
