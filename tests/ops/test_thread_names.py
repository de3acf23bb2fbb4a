"""``ops/thread_names.py``: a server's threads get their ``threading`` names as OS names, so
``top -H`` and ``/proc`` tell them apart; ``tools/proc.thread_cpu`` reads them back with their
CPU, which ``croupier.tools.phase_cpu`` reports per kind of thread."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from croupier.ops.thread_names import COMM_BYTES, name_os_threads, os_name
from croupier.tools.proc import thread_cpu, thread_cpu_delta


def comm(tid: int | None) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


def test_os_names_drop_the_prefix_and_fit_linux() -> None:
    assert os_name("croupier-worker-push") == "worker-push"
    assert os_name("croupier-worker-replicate") == "worker-replicat"
    assert os_name("PartitionActor-12") == "PartitionActor-"
    assert os_name("naïve") == "na?ve"
    assert all(len(os_name(n).encode()) <= COMM_BYTES for n in ("x" * 40, "croupier-" * 5))


def test_every_thread_but_the_main_one_is_named_once() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="croupier-test-naming", daemon=True)
    worker.start()
    main_before = comm(threading.main_thread().native_id)
    try:
        assert name_os_threads() >= 1
        assert comm(worker.native_id) == "test-naming"
        assert comm(threading.main_thread().native_id) == main_before  # the process's own name
        assert name_os_threads() == 0  # nothing new
    finally:
        stop.set()
        worker.join()


def test_thread_cpu_counts_each_kind_of_thread_by_its_name() -> None:
    stop, go = threading.Event(), threading.Event()

    def spin() -> None:
        go.wait()
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        stop.wait()

    spinners = [threading.Thread(target=spin, name=f"croupier-spin-{i}", daemon=True) for i in range(2)]
    for t in spinners:
        t.start()
    name_os_threads()
    before = thread_cpu([os.getpid()])
    go.set()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            after = thread_cpu([os.getpid()])
            if thread_cpu_delta(before, after).get("spin", 0.0) >= 0.4:
                break
            time.sleep(0.05)
        delta = thread_cpu_delta(before, after)
        assert delta["spin"] >= 0.4  # both spinners, under one kind
        assert {name for name, _ in after.values()} >= {"spin-0", "spin-1"}
    finally:
        go.set()
        stop.set()
        for t in spinners:
            t.join()
