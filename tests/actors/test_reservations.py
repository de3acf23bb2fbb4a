"""The master's ``RESERVE``s: every placed worker holds its locations before the placement's
reply leaves, and a worker that does not answer delays the reply only until the timeout."""

from __future__ import annotations

import threading

from croupier.actors.reservations import ReservationSender
from croupier.core import commands as c
from croupier.core.dataplane import Reserve
from croupier.transports.master_client import MasterClient
from tests.sdk.fakes import fake_cluster


def test_a_registration_and_a_revive_reply_only_once_their_workers_hold_the_locations() -> None:
    with fake_cluster(3) as cluster, MasterClient(cluster.master_url, timeout=10) as master:
        app = master.call(c.RegisterApp("reserved"))["app_id"]
        sid = master.call(c.RegisterShuffle(app, 1, 6, replicate=True))["shuffle_id"]
        for p in range(6):
            loc = master.call(c.GetLocations(app, sid, p))["locations"][0]
            primary, replica = loc["primary"]["worker_id"], loc["replica"]["worker_id"]
            cluster.worker(primary).reservations.check_push(app, sid, ((p, 0),), replica)
            cluster.worker(replica).reservations.check_replicate(app, sid, ((p, 0),))
        revived = master.call(c.RevivePartition(app, sid, 2, 0))["locations"][-1]
        assert revived["epoch"] == 1
        primary, replica = revived["primary"]["worker_id"], revived["replica"]["worker_id"]
        cluster.worker(primary).reservations.check_push(app, sid, ((2, 1),), replica)
        cluster.worker(replica).reservations.check_replicate(app, sid, ((2, 1),))


def test_a_worker_that_does_not_answer_holds_the_reply_until_the_timeout_only() -> None:
    sender = ReservationSender(timeout=0.3)
    done = threading.Event()
    message = Reserve("app", 0, "inc", 1, False, pairs=(("w1", None),))
    try:
        sender.send([("w1", "tcp://127.0.0.1:9", message)], done.set)  # nothing listens there
        assert done.wait(10)
        nothing = threading.Event()
        sender.send([], nothing.set)
        assert nothing.is_set()
    finally:
        sender.stop()
