"""``croupier admin workers`` shows each worker's data directories (issue 15)."""

from __future__ import annotations

from croupier.core.replies import MasterInfo, StatusReply
from croupier.services.cli.admin import _add_dirs

MiB = 1024**2


def test_workers_rows_show_free_space_and_health_per_directory() -> None:
    dirs = {
        "w0": (("/d0", 50 * MiB, 100 * MiB, 10 * MiB, True), ("/d1", 5 * MiB, 100 * MiB, 10 * MiB, True)),
        "w1": (("/d0", 90 * MiB, 100 * MiB, 10 * MiB, False),),
    }
    master = MasterInfo(role="leader", url="tcp://m", worker_dirs=dirs)
    status = StatusReply(0, "", 0, (), (), (), master=master)
    rows = [{"worker_id": "w0"}, {"worker_id": "w1"}, {"worker_id": "w2"}]
    _add_dirs(rows, status)
    assert [r["dirs"] for r in rows] == ["/d0 50/100MiB ok; /d1 5/100MiB low", "/d0 90/100MiB failed", "?"]
