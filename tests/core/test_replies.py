"""Master replies: the typed replies encode to the exact JSON the master sent before they were typed.

The literals below were taken from the master's hand-built reply dicts before
``croupier.core.replies`` existed (PROTOCOL §4 documents the same shapes); a
client in another language reads these bytes, so they must not change.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from croupier.core import commands as c
from croupier.core.codec import to_json
from croupier.core.decide import decide
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError, InternalError
from croupier.core.events import WorkerRemoved
from croupier.core.replies import (
    LocationsReply,
    MasterInfo,
    RegisterAppReply,
    Reply,
    ShuffleSummary,
    StatusReply,
    WorkerAddress,
    decode_reply,
)
from croupier.core.state import MasterState, apply
from croupier.core.wire import encode_body

PINNED = {
    "register_worker_0": '{"worker_id":"w0","incarnation":"inc0"}',
    "register_worker_1": '{"worker_id":"w1","incarnation":"inc1"}',
    "register_worker_2": '{"worker_id":"w2","incarnation":"inc2"}',
    "register_worker_3": '{"worker_id":"w3","incarnation":"inc3"}',
    "worker_heartbeat": '{"status":"active","excluded":false}',
    "take_over": '{"term":1}',
    "ping": '{"pong":true,"term":1,"time_us":1500000}',
    # key_tag: the master's own (it derives app_key from it and takes it out before sending)
    "register_app": '{"app_id":"app1","name":"job","key_tag":"1cb96cea362dedb9"}',
    "app_heartbeat": '{"app_id":"app1"}',
    "register_shuffle": (
        '{"workers":{"w0":{"worker_id":"w0","host":"h0","control_port":10,"push_port":20,"replicate'
        '_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"},"w1":{"worker_id":"w1","'
        'host":"h1","control_port":11,"push_port":21,"replicate_port":31,"fetch_port":41,"incarnati'
        'on":"inc1","status":"active"},"w2":{"worker_id":"w2","host":"h2","control_port":12,"push_p'
        'ort":22,"replicate_port":32,"fetch_port":42,"incarnation":"inc2","status":"active"},"w3":{'
        '"worker_id":"w3","host":"h3","control_port":13,"push_port":23,"replicate_port":33,"fetch_p'
        'ort":43,"incarnation":"inc3","status":"active"}},"revived":[],"app_id":"app1","shuffle_id"'
        ':0,"num_mappers":2,"num_partitions":3,"replicate":true,"pairs":[["w3","w0"],["w0","w2"],["'
        'w2","w1"]],"revived_partitions":0,"mappers_ended":0,"committed":false,"lost_partitions":[]'
        ',"total_bytes":0}'
    ),
    "revive": (
        '{"app_id":"app1","shuffle_id":0,"num_mappers":2,"winner_runs":[],"committed":false,"par'
        'tition":1,"locations":[{"epoch":0,"primary":{"worker_id":"w0","host":"h0","control_port":10,'
        '"push_port":20,"replicate_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"}'
        ',"replica":{"worker_id":"w2","host":"h2","control_port":12,"push_port":22,"replicate_port"'
        ':32,"fetch_port":42,"incarnation":"inc2","status":"active"}},{"epoch":1,"primary":{"worker'
        '_id":"w1","host":"h1","control_port":11,"push_port":21,"replicate_port":31,"fetch_port":41'
        ',"incarnation":"inc1","status":"active"},"replica":{"worker_id":"w3","host":"h3","control_'
        'port":13,"push_port":23,"replicate_port":33,"fetch_port":43,"incarnation":"inc3","status":'
        '"active"}}],"lost":false,"failed_copies":[]}'
    ),
    "exclude": '{"changed":true}',
    "exclude_again": '{"changed":false}',
    "decommission": '{"changed":true,"status":"decommissioning"}',
    "decommission_again": '{"changed":false,"status":"decommissioning"}',
    "lose": '{"changed":true}',
    "lose_again": '{"changed":false}',
    "get_shuffle_lost": (
        '{"workers":{"w0":{"worker_id":"w0","host":"h0","control_port":10,"push_port":20,"replicate'
        '_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"},"w1":{"worker_id":"w1","'
        'host":"h1","control_port":11,"push_port":21,"replicate_port":31,"fetch_port":41,"incarnati'
        'on":"inc1","status":"lost"},"w2":{"worker_id":"w2","host":"h2","control_port":12,"push_por'
        't":22,"replicate_port":32,"fetch_port":42,"incarnation":"inc2","status":"decommissioning"}'
        ',"w3":{"worker_id":"w3","host":"h3","control_port":13,"push_port":23,"replicate_port":33,"'
        'fetch_port":43,"incarnation":"inc3","status":"active"}},"revived":[[1,1,"w1","w3"]],"app_i'
        'd":"app1","shuffle_id":0,"num_mappers":2,"num_partitions":3,"replicate":true,"pairs":[["w3'
        '","w0"],["w0","w2"],["w2","w1"]],"revived_partitions":1,"mappers_ended":0,"committed":fals'
        'e,"lost_partitions":[],"total_bytes":0}'
    ),
    "get_shuffle": (
        '{"workers":{"w0":{"worker_id":"w0","host":"h0","control_port":10,"push_port":20,"replicate'
        '_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"},"w2":{"worker_id":"w2","'
        'host":"h2","control_port":12,"push_port":22,"replicate_port":32,"fetch_port":42,"incarnati'
        'on":"inc2","status":"decommissioning"},"w3":{"worker_id":"w3","host":"h3","control_port":1'
        '3,"push_port":23,"replicate_port":33,"fetch_port":43,"incarnation":"inc3","status":"active'
        '"}},"revived":[[1,1,"w1","w3"]],"app_id":"app1","shuffle_id":0,"num_mappers":2,"num_partit'
        'ions":3,"replicate":true,"pairs":[["w3","w0"],["w0","w2"],["w2","w1"]],"revived_partitions'
        '":1,"mappers_ended":0,"committed":false,"lost_partitions":[],"total_bytes":0}'
    ),
    "mapper_end": '{"winner":1,"won":true,"all_ended":false}',
    "mapper_end_again": '{"winner":1,"won":false,"all_ended":false}',
    "mapper_end_last": '{"winner":0,"won":true,"all_ended":true}',
    "report_commit": (
        '{"app_id":"app1","shuffle_id":0,"num_mappers":2,"num_partitions":3,"replicate":true,"pairs'
        '":[["w3","w0"],["w0","w2"],["w2","w1"]],"revived_partitions":1,"mappers_ended":2,"committe'
        'd":true,"lost_partitions":[0],"total_bytes":99}'
    ),
    "get_locations": (
        '{"app_id":"app1","shuffle_id":0,"num_mappers":2,"winner_runs":[[0,1,1],[1,2,0]],"committed'
        '":true,"partition":1,"locations":[{"epoch":0,"primary":{"worker_id":"w0","host":"h0","control_port":10,"pu'
        'sh_port":20,"replicate_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"},"r'
        'eplica":{"worker_id":"w2","host":"h2","control_port":12,"push_port":22,"replicate_port":32'
        ',"fetch_port":42,"incarnation":"inc2","status":"decommissioning"}},{"epoch":1,"primary":{"'
        'worker_id":"w1","status":"removed"},"replica":{"worker_id":"w3","host":"h3","control_port"'
        ':13,"push_port":23,"replicate_port":33,"fetch_port":43,"incarnation":"inc3","status":"acti'
        've"}}],"lost":false,"failed_copies":[],"maps":[[0,1]]}'
    ),
    "get_locations_batch": (
        '{"app_id":"app1","shuffle_id":0,"num_mappers":2,"winner_runs":[[0,1,1],[1,2,0]],"committed'
        '":true,"partitions":[{"partition":0,"locations":[{"epoch":0,"primary":{"worker_id":"w3","host":"h3","contr'
        'ol_port":13,"push_port":23,"replicate_port":33,"fetch_port":43,"incarnation":"inc3","statu'
        's":"active"},"replica":{"worker_id":"w0","host":"h0","control_port":10,"push_port":20,"rep'
        'licate_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"}}],"lost":true,"fai'
        'led_copies":[[0,"w0"],[0,"w3"]],"maps":[[0,2]],"lost_maps":[[0,2]]},{"partition":2,"locati'
        'ons":[{"epoch":0,"primary":{"worker_id":"w2","host":"h2","control_port":12,"push_port":22,'
        '"replicate_port":32,"fetch_port":42,"incarnation":"inc2","status":"decommissioning"},"repl'
        'ica":{"worker_id":"w1","status":"removed"}}],"lost":false,"failed_copies":[[0,"w1"]],"maps'
        '":[[0,2]]}]}'
    ),
    "status": (
        '{"term":1,"leader":"tcp://m:1","seq":0,"workers":[{"worker_id":"w0","host":"h0","control_p'
        'ort":10,"push_port":20,"replicate_port":30,"fetch_port":40,"incarnation":"inc0","status":"'
        'active","slots":8,"used_slots":2,"excluded":false},{"worker_id":"w2","host":"h2","control_'
        'port":12,"push_port":22,"replicate_port":32,"fetch_port":42,"incarnation":"inc2","status":'
        '"decommissioning","slots":8,"used_slots":2,"excluded":false},{"worker_id":"w3","host":"h3"'
        ',"control_port":13,"push_port":23,"replicate_port":33,"fetch_port":43,"incarnation":"inc3"'
        ',"status":"active","slots":8,"used_slots":2,"excluded":true}],"apps":[{"app_id":"app1","na'
        'me":"job","shuffles":1}],"shuffles":[{"app_id":"app1","shuffle_id":0,"num_mappers":2,"num_'
        'partitions":3,"replicate":true,"pairs":[["w3","w0"],["w0","w2"],["w2","w1"]],"revived_part'
        'itions":1,"mappers_ended":2,"committed":true,"lost_partitions":[0],"total_bytes":99}]}'
    ),
    "register_unreplicated": (
        '{"workers":{"w0":{"worker_id":"w0","host":"h0","control_port":10,"push_port":20,"replicate'
        '_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"}},"revived":[],"app_id":"'
        'app1","shuffle_id":5,"num_mappers":1,"num_partitions":2,"replicate":false,"pairs":[["w0",n'
        'ull]],"revived_partitions":0,"mappers_ended":0,"committed":false,"lost_partitions":[],"tot'
        'al_bytes":0}'
    ),
    "get_locations_unreplicated": (
        '{"app_id":"app1","shuffle_id":5,"num_mappers":1,"winner_runs":[],"committed":false,"partiti'
        'on":1,"locations":[{"epoch":0,"primary":{"worker_id":"w0","host":"h0","control_port":10,"pu'
        'sh_port":20,"replicate_port":30,"fetch_port":40,"incarnation":"inc0","status":"active"},"r'
        'eplica":null}],"lost":false,"failed_copies":[]}'
    ),
    "unregister_shuffle": '{"changed":true}',
    "unregister_app": '{"changed":true}',
    "expire_app": '{"changed":false}',
}


def scenario() -> list[tuple[str, Reply]]:
    """Every master command, in an order that reaches lost, removed and decommissioning workers."""
    state = MasterState()
    rng = random.Random(3)
    out: list[tuple[str, Reply]] = []

    def run(name: str, cmd: c.Command, now: float = 1.5) -> None:
        reply, events = decide(state, cmd, now, rng)
        for e in events:
            apply(state, e)
        out.append((name, reply))

    for i in range(4):
        run(
            f"register_worker_{i}",
            c.RegisterWorker(f"w{i}", f"h{i}", 10 + i, 20 + i, 30 + i, 40 + i, 8, f"inc{i}"),
        )
    run("worker_heartbeat", c.WorkerHeartbeat("w0", "inc0"))
    run("take_over", c.TakeOver(1, "tcp://m:1"))
    run("ping", c.Ping())
    run("register_app", c.RegisterApp("job", "app1"))
    run("app_heartbeat", c.AppHeartbeat("app1"))
    run("register_shuffle", c.RegisterShuffle("app1", 2, 3))
    run("revive", c.RevivePartition("app1", 0, 1, 0, failed_workers=("w0",)))
    run("exclude", c.ExcludeWorker("w3"))
    run("exclude_again", c.ExcludeWorker("w3"))
    run("decommission", c.DecommissionWorker("w2"))
    run("decommission_again", c.DecommissionWorker("w2"))
    run("lose", c.LoseWorker("w1"))
    run("lose_again", c.LoseWorker("w1"))
    run("get_shuffle_lost", c.GetShuffle("app1", 0))
    apply(state, WorkerRemoved("w1"))
    run("get_shuffle", c.GetShuffle("app1", 0))
    run("mapper_end", c.MapperEnd("app1", 0, 0, 1, 3, "Bw=="))  # partitions 0, 1, 2
    run("mapper_end_again", c.MapperEnd("app1", 0, 0, 0, 3, "Bw=="))
    run("mapper_end_last", c.MapperEnd("app1", 0, 1, 0, 2, "BQ=="))  # partitions 0, 2
    # both copies of partition 0 failed: the seals of maps 0 and 1 there survive nowhere
    failed = ((0, 0, "w0"), (0, 0, "w3"), (2, 0, "w1"))
    run("report_commit", c.ReportCommit("app1", 0, failed, 99, 3, lost_maps=((0, 0, 2),)))
    run("get_locations", c.GetLocations("app1", 0, 1))
    run("get_locations_batch", c.GetLocationsBatch("app1", 0, (0, 2)))
    run("status", c.Status())
    run("register_unreplicated", c.RegisterShuffle("app1", 1, 2, replicate=False, shuffle_id=5))
    run("get_locations_unreplicated", c.GetLocations("app1", 5, 1))
    run("unregister_shuffle", c.UnregisterShuffle("app1", 0))
    run("unregister_app", c.UnregisterApp("app1"))
    run("expire_app", c.ExpireApp("app1"))
    return out


REPLIES = scenario()


def test_the_scenario_covers_every_pinned_reply() -> None:
    assert [name for name, _ in REPLIES] == list(PINNED)


@pytest.mark.parametrize(("name", "reply"), REPLIES, ids=[name for name, _ in REPLIES])
def test_reply_encodes_to_the_pinned_bytes(name: str, reply: Reply) -> None:
    assert encode_body(to_json(reply)).decode() == PINNED[name]


@pytest.mark.parametrize(("name", "reply"), REPLIES, ids=[name for name, _ in REPLIES])
def test_reply_decodes_back_to_itself(name: str, reply: Reply) -> None:
    assert decode_reply(type(reply), json.loads(PINNED[name]), name) == reply


def test_register_app_reply_carries_the_app_key_only_when_the_master_adds_it() -> None:
    """``decide`` (pure, logged) never knows the key; a master with a secret adds ``app_key``."""
    reply = dict(REPLIES)["register_app"]
    assert isinstance(reply, RegisterAppReply) and reply.app_key is None
    body = {"app_id": "app1", "name": "job", "app_key": "ab" * 32}
    keyed = decode_reply(RegisterAppReply, body, "register_app")
    assert keyed == RegisterAppReply("app1", "job", "ab" * 32)
    assert (
        encode_body(to_json(keyed)).decode() == '{"app_id":"app1","name":"job","app_key":"' + "ab" * 32 + '"}'
    )


def test_removed_worker_is_only_its_id() -> None:
    locations = dict(REPLIES)["get_locations"]
    assert isinstance(locations, LocationsReply)
    removed = locations.locations[1].primary
    assert removed == WorkerAddress("w1")
    assert removed.status is WorkerStatus.REMOVED and not removed.known
    assert locations.locations[1].replica is not None and locations.locations[1].replica.known


def test_status_master_object_keeps_the_services_key_order() -> None:
    info = MasterInfo(role="leader", url="tcp://m:1", log="ZooKeeperEventLog", term=3, seq=9, writable=True)
    status = StatusReply(3, "tcp://m:1", 9, (), (), (), info)
    assert encode_body(to_json(status)).decode() == (
        '{"term":3,"leader":"tcp://m:1","seq":9,"workers":[],"apps":[],"shuffles":[],'
        '"master":{"role":"leader","url":"tcp://m:1","log":"ZooKeeperEventLog","term":3,"seq":9,'
        '"writable":true}}'
    )
    follower = {"role": "follower", "url": "tcp://f:1", "term": 3, "leader": "", "followers": ["tcp://f:1"]}
    body = {**to_json(status), "master": {**follower, "log": "ZooKeeperEventLog", "seq": 9}}
    decoded = decode_reply(StatusReply, body, "Status")
    assert decoded.master is not None and decoded.master.followers == ("tcp://f:1",)
    assert decoded.master.leader == ""


def _summary() -> dict[str, Any]:
    return dict(json.loads(PINNED["register_shuffle"]))


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda b: b.pop("num_partitions"), "missing field 'num_partitions'"),
        (lambda b: b.update(replicate="yes"), "ShuffleSummary.replicate: expected a boolean"),
        (lambda b: b["workers"]["w0"].update(push_port="20"), "ShuffleSummary.workers.w0.push_port"),
        (lambda b: b["workers"]["w1"].update(status="gone"), "ShuffleSummary.workers.w1.status"),
        (lambda b: b.update(pairs=[["w3"]]), "ShuffleSummary.pairs[0]: expected 2 items"),
        (lambda b: b.update(extra=1), "unknown fields ['extra']"),
    ],
)
def test_malformed_reply_is_an_internal_error_naming_the_field(mutate: Any, path: str) -> None:
    body = _summary()
    mutate(body)
    with pytest.raises(InternalError, match="malformed reply from the master to GetShuffle") as raised:
        decode_reply(ShuffleSummary, body, "GetShuffle")
    assert path in str(raised.value)
    assert isinstance(raised.value, CroupierError) and not raised.value.retriable
