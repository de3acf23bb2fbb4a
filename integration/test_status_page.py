"""The status page in a real browser (Debian's headless ``chromium``), during a running shuffle.

The page is loaded while one mapper has ended and the other is still writing; the DOM
after its scripts ran must show both workers (with their memory and disks) and the shuffle
at 50%. The test also takes a screenshot: set ``CROUPIER_SCREENSHOT=PATH`` to keep it (the
the monitoring guide's ``docs/status-page.png`` was made so). Skipped, with the reason, without chromium
(``apt-get install chromium``).
"""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from croupier.core.config import WorkerConfig
from croupier.services.local import LocalCluster

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless chromium to completion (its own process group, killed whole on timeout)."""
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # root in a container has no user namespaces
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",  # let the page's fetches and timers run before the dump
        *args,
    ]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class Rows(html.parser.HTMLParser):
    """``data-key`` of every row in each table of the dumped DOM, and each row's cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, list[str]]] = {}
        self._table = ""
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables.setdefault(self._table, {})
        elif tag == "tr" and "data-key" in a:
            self._row = self.tables[self._table].setdefault(a["data-key"] or "", [])
        elif tag == "td" and self._row is not None:
            self._row.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row:
            self._row[-1] += data


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the status page is not tested")
    with LocalCluster(
        workers=2,
        base_dir=tmp_path / "cluster",
        http=True,
        worker_config=WorkerConfig(heartbeat_interval=0.2),
    ) as lc:
        yield lc


def test_the_page_shows_the_workers_and_a_running_shuffle(cluster: LocalCluster, tmp_path: Path) -> None:
    assert cluster.master is not None and cluster.master.http is not None
    url = cluster.master.http.url + "/"
    with croupier.connect(cluster.master_url) as client:
        app = client.register_app("page")
        sh = app.register_shuffle(num_mappers=2, num_partitions=8)
        with sh.writer(0) as w:
            for i in range(20_000):
                w.write(i % 8, b"x" * 200)
        running = sh.writer(1)  # still writing while the page is loaded
        try:
            running.write(0, b"y" * 100)
            time.sleep(2.5)  # a few of the master's samples (every 2 s), with the heartbeats' HTTP ports
            dom = chromium(["--dump-dom", url], tmp_path / "profile")
            assert dom.returncode == 0, dom.stderr[-2000:]
            shot = Path(os.environ.get("CROUPIER_SCREENSHOT", tmp_path / "status-page.png"))
            taken = chromium([f"--screenshot={shot}", "--window-size=1440,900", url], tmp_path / "profile")
            assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]
        finally:
            running.close()
    rows = Rows()
    rows.feed(dom.stdout)
    workers = rows.tables["workers"]
    assert set(workers) == {w.worker_id for w in cluster.workers}
    for cells in workers.values():
        assert cells[1] == "active"
        assert "%" in cells[5]  # memory against the cap
        assert cells[7].endswith("B")  # free space of its disks
    shuffle = rows.tables["shuffles"][f"{app.app_id}/{sh.shuffle_id}"]
    assert shuffle[1:3] == ["2", "8"]
    assert shuffle[3].strip() == "50%" and shuffle[4] == "writing"
    events = [cells[2] for cells in rows.tables["events"].values()]
    assert f"app {app.app_id} registered" in events
    assert 'id="summary"' in dom.stdout and "2 workers" in dom.stdout
