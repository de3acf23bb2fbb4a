"""``tools/bench_scrape``: the scraper counts every worker, even one whose HTTP port the
master learns from a heartbeat only after the scraper is made (the CI failure of stop 39:
one of two workers left out, so the byte counters held half of the shuffle's bytes)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from croupier.services.local import LocalCluster
from croupier.tools.bench_scrape import _worker_urls


class _Cluster:
    """A master's STATUS in which worker ``w1``'s HTTP port appears after ``late`` reads."""

    def __init__(self, late: int) -> None:
        self.late = late

    def status(self) -> dict[str, Any]:
        http = {"w0": 8000}
        if self.late <= 0:
            http["w1"] = 8001
        self.late -= 1
        workers = [{"worker_id": w, "host": "127.0.0.1"} for w in ("w0", "w1")]
        return {"master": {"worker_http": http}, "workers": workers}


def test_a_worker_whose_port_comes_with_a_later_heartbeat_is_scraped_too() -> None:
    urls = _worker_urls(cast(LocalCluster, _Cluster(late=3)))
    assert urls == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]


def test_a_port_that_never_comes_is_an_error_naming_the_worker() -> None:
    with pytest.raises(RuntimeError, match="w1"):
        _worker_urls(cast(LocalCluster, _Cluster(late=10**9)), timeout=0.3)
