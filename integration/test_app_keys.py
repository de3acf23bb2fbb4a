"""A shuffle's handle across processes (issue 14 item 2): the process that registered the
shuffle passes ``Shuffle.handle()`` to others, which open it with
``croupier.connect(url).open_shuffle(handle)`` and write and read with the app's key. A
process that knows only the ids cannot write.

The cluster is built in this process with a cluster secret (``tests/sdk/secure.py``); the
clients are real child processes. The handle travels in the environment, not on the
command line, as a credential should.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import croupier
from tests.sdk.secure import SecureCluster, secure_cluster

pytestmark = pytest.mark.integration

WRITE = """
import os, sys, croupier
map_id = int(sys.argv[2])
with croupier.connect(sys.argv[1]) as client:
    sh = client.open_shuffle(os.environ["CROUPIER_HANDLE"])
    with sh.writer(map_id) as w:
        for i in range(50):
            w.write(i % sh.num_partitions, b"map%d-%03d" % (map_id, i))
print(w.won)
"""

READ = """
import os, sys, croupier
with croupier.connect(sys.argv[1]) as client:
    sh = client.open_shuffle(os.environ["CROUPIER_HANDLE"])
    for p in range(sh.num_partitions):
        for record in sh.reader(p):
            print(p, record.decode())
"""

BY_IDS = """
import sys, croupier
from croupier.core.errors import CroupierError
with croupier.connect(sys.argv[1]) as client:
    try:
        sh = client.open_shuffle(sys.argv[2], int(sys.argv[3]))
        with sh.writer(0) as w:
            w.write(0, b"by ids")
    except CroupierError as exc:
        print(exc.code)
    else:
        print("WROTE")
"""


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureCluster]:
    with secure_cluster(tmp_path, workers=2) as cluster:
        yield cluster


def _child(code: str, *args: str, handle: str | None = None) -> str:
    env = dict(os.environ)
    if handle is not None:
        env["CROUPIER_HANDLE"] = handle
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_handle_lets_other_processes_write_and_read_the_shuffle(secure: SecureCluster) -> None:
    url = secure.master_url
    with croupier.connect(url) as client:
        app = client.register_app("cross-process")
        sh = app.register_shuffle(num_mappers=3, num_partitions=4)
        handle = sh.handle()
        # a process with only the ids cannot write (refused: no key, so no valid digest or MAC)
        assert _child(BY_IDS, url, app.app_id, str(sh.shuffle_id)).strip() in {"UNAUTHORIZED", "BAD_REQUEST"}
        assert _child(WRITE, url, "0", handle=handle).strip() == "True"
        assert _child(WRITE, url, "1", handle=handle).strip() == "True"
        with sh.writer(2) as w:  # and the registering process writes the last map itself
            for i in range(50):
                w.write(i % 4, b"map2-%03d" % i)
        lines = _child(READ, url, handle=handle).splitlines()
        got = sorted(tuple(line.split(" ", 1)) for line in lines)
        expected = sorted((str(i % 4), f"map{m}-{i:03d}") for m in range(3) for i in range(50))
        assert got == expected
        assert [r.decode() for r in sh.reader(1)] == [
            f"map{m}-{i:03d}" for m in range(3) for i in range(1, 50, 4)
        ]
