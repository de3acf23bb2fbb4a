"""Which apps' objects the master's orphan sweep may delete from the object store (issue 26).

Pure: the listing, the live apps and the time are passed in. The store's layout under the
cluster's prefix is ``<app_id>/<shuffle_id>/...`` (``transports/objstore.object_key``). An app
prefix is an **orphan** when all of these hold:

- the app is not live on this master (not registered, or unregistered or expired), in the
  state folded from the whole log (the caller sweeps only once its log is loaded);
- every object under it is laid out as Croupier lays out its objects: a valid app id, then a
  numeric shuffle id, then a name. A prefix holding anything else (another cluster's prefix
  nested inside this one, an operator's files) is never touched;
- its newest object is older than ``grace`` seconds: an app whose id is registered again, or
  whose objects are still being written, has fresh objects and waits for the next sweep.

Memory is bounded by the number of app prefixes, never by the number of objects: the listing
is consumed as a stream.

**Sweep claims.** Two clusters given the same prefix would each take the other's apps for
orphans. A master claims the prefix for its cluster once its log is loaded, and again before
each sweep: it writes ``_sweepers/<cluster>`` (``claim_key``), then lists the claims, and
sweeps only when there is no other (``rival_claims``). Both write before they list, so of two
clusters on one prefix each sees the other, and a cluster's objects are younger than its
claim. Claims never expire (a stopped cluster's shuffles may outlive it): an operator retires
a gone cluster's claim by deleting it. Claims are not Croupier's copy layout: never swept.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from croupier.core.ids import MAX_ID_LENGTH

__all__ = ["CLAIMS", "claim_key", "copy_app", "orphan_apps", "rival_claims"]

CLAIMS = "_sweepers/"
_CLUSTER = re.compile(r"[0-9a-f]{1,64}")

_COPY_KEY = re.compile(rf"([A-Za-z0-9._-]{{1,{MAX_ID_LENGTH}}})/[0-9]{{1,10}}/[^/].*", re.DOTALL)


def copy_app(key: str) -> str | None:
    """The app id of a key laid out as ``<app_id>/<shuffle_id>/<name>``; None for any other key."""
    m = _COPY_KEY.fullmatch(key)
    if m is None or m.group(1) in (".", ".."):
        return None
    return m.group(1)


def orphan_apps(
    objects: Iterable[tuple[str, float]], live: Collection[str], now: float, grace: float
) -> list[str]:
    """The app prefixes whose objects may all be deleted, sorted.

    Parameters:
        objects: ``(key, last modified, in seconds since the epoch)`` of every object under the
            cluster's prefix, keys relative to it.
        live: the apps this master knows as registered.
        now: the time, in the same seconds as ``objects``' times.
        grace: an app whose newest object is younger than this is left alone.
    """
    newest: dict[str, float] = {}
    foreign: set[str] = set()
    for key, modified in objects:
        app = copy_app(key)
        if app is None:
            foreign.add(key.split("/", 1)[0])
            continue
        if modified > newest.get(app, float("-inf")):
            newest[app] = modified
    return sorted(
        app for app, t in newest.items() if app not in live and app not in foreign and t <= now - grace
    )


def claim_key(cluster: str) -> str:
    """The key of ``cluster``'s sweep claim (``cluster``: 1-64 lowercase hex digits)."""
    if not _CLUSTER.fullmatch(cluster):
        raise ValueError(f"a claim's cluster is 1-64 lowercase hex digits, not {cluster!r}")
    return f"{CLAIMS}{cluster}"


def rival_claims(keys: Iterable[str], own: str) -> list[str]:
    """The keys under ``CLAIMS`` (relative to the cluster's prefix) that are not ``own``'s claim,
    sorted: other clusters' claims, or objects this master does not understand there. Claims
    never expire: a cluster that stopped may still have shuffles under the prefix."""
    mine = claim_key(own)
    return sorted(k for k in keys if k != mine)
