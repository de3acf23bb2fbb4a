"""Stateful fuzzing of a live in-process cluster (issue 13): a master and two workers get
random sequences of valid and invalid messages; after every step the master and each
worker still answer PING, and at the end a normal small shuffle completes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from croupier.core.config import WorkerConfig
from croupier.core.wire import MsgType
from croupier.services.local import LocalCluster
from tests.fuzz.budget import LONG_RUN
from tests.fuzz.live import RawClient, small_shuffle
from tests.fuzz.mutate import json_values, odd_strings

MASTER_TYPES = [t for t in MsgType if int(t) < 50 and t is not MsgType.REGISTER_WORKER]
WORKER_PORTS = {
    "control": [MsgType.PING, MsgType.COMMIT_FILES, MsgType.DESTROY, MsgType.WORKER_INFO],
    "push": [MsgType.PUSH],
    "replicate": [MsgType.REPLICATE],
    "fetch": [MsgType.OPEN_STREAM, MsgType.FETCH_CHUNK, MsgType.FETCH_SMALL],
}
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            k: st.one_of(json_values, odd_strings)
            for k in ("app_id", "shuffle_id", "partition", "epoch", "role", "incarnation", "batches",
                      "replica", "name", "chunk", "reason", "worker_id", "host")
        },
    ).map(lambda d: json.dumps(d).encode()),
)  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    config = WorkerConfig(heartbeat_interval=0.5, max_message_bytes=4 * 1024 * 1024)
    with LocalCluster(workers=2, base_dir=tmp_path, worker_config=config) as lc:
        yield lc


# the steps' reprs (long random bodies) only matter when a step fails
@pytest.mark.filterwarnings("ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning")
def test_live_cluster_survives_random_messages(cluster: LocalCluster) -> None:
    clients: dict[str, RawClient] = {"master": RawClient(cluster.master_url)}
    for i, worker in enumerate(cluster.workers):
        for port, url in worker.urls.items():
            clients[f"w{i}.{port}"] = RawClient(url)

    class LiveCluster(RuleBasedStateMachine):
        @rule(msg_type=st.sampled_from(MASTER_TYPES), body=bodies)
        def master_message(self, msg_type: MsgType, body: bytes) -> None:
            clients["master"].request(msg_type, body)

        @rule(name=st.text("abc", min_size=1, max_size=8))
        def valid_app(self, name: str) -> None:
            clients["master"].request(MsgType.REGISTER_APP, {"name": name, "app_id": name})

        @rule(worker=st.integers(0, 1), port=st.sampled_from(sorted(WORKER_PORTS)), data=st.data())
        def worker_message(self, worker: int, port: str, data: st.DataObject) -> None:
            msg_type = data.draw(st.sampled_from([*WORKER_PORTS[port], MsgType.PING, MsgType(1)]))
            payloads = data.draw(st.lists(st.binary(max_size=80), max_size=3))
            clients[f"w{worker}.{port}"].request(msg_type, data.draw(bodies), *payloads)

        @invariant()
        def everyone_answers_ping(self) -> None:
            assert clients["master"].request(MsgType.PING, b"{}") == 0
            for i in range(len(cluster.workers)):
                assert clients[f"w{i}.control"].request(MsgType.PING, b"{}") == 0

    runs = LONG_RUN // 1000 if LONG_RUN else 10
    try:
        run_state_machine_as_test(
            LiveCluster,
            settings=settings(
                max_examples=max(3, runs),
                stateful_step_count=30,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            ),
        )
        small_shuffle(cluster.master_url, "after-fuzz")
    finally:
        for client in clients.values():
            client.close()
