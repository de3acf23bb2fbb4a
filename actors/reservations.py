"""``ReservationSender``: the master tells workers what it placed on them (``RESERVE``).

After a ``ShuffleRegistered`` or ``PartitionRevived`` event is logged, and before the
``REGISTER_SHUFFLE`` or ``REVIVE_PARTITION`` reply leaves, every worker the placement
names gets a ``RESERVE`` on its control port. The reply waits until each has answered,
or until ``timeout``: a worker that did not take its reservation in time refuses the
pushes for it (``STALE_LOCATION``) and the writers revive those partitions elsewhere.

``reserves`` builds the messages from the folded state on the master actor's thread;
``send`` only queues them on an ``AsyncRpcClient`` (its own thread runs the callbacks),
so the master actor never blocks on a worker.

State: the client, and one countdown per reply in flight (behind a lock).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from croupier.core.codec import to_json
from croupier.core.dataplane import Reserve
from croupier.core.enums import WorkerStatus
from croupier.core.errors import CroupierError
from croupier.core.events import Event, PartitionRevived, ShuffleRegistered
from croupier.core.state import MasterState
from croupier.core.wire import MsgType
from croupier.transports.async_rpc import AsyncRpcClient
from croupier.transports.auth import Signer
from croupier.transports.curve import CurveClient
from croupier.transports.log_context import key_fields
from croupier.transports.rpc import Reply

__all__ = ["RESERVE_TIMEOUT", "ReservationSender", "Send", "reserves"]

log = logging.getLogger(__name__)

RESERVE_TIMEOUT = 5.0  # seconds a placement reply waits for the workers' acks

Send = tuple[str, str, Reserve]  # worker, control URL, message


def reserves(state: MasterState, events: list[Event]) -> list[Send]:
    """The ``RESERVE`` of every worker that ``events`` placed locations on (state already folded).

    Workers that are lost or unknown are skipped: no writer can reach them either.
    """
    out: list[Send] = []
    for event in events:
        if isinstance(event, ShuffleRegistered):
            out += shuffle_reserves(state, event.app_id, event.shuffle_id, dict(event.incarnations))
        elif isinstance(event, PartitionRevived):
            info = state.shuffle(event.app_id, event.shuffle_id)
            if info is None:
                continue
            placed = ((event.partition, event.epoch, event.primary, event.replica),)
            message = Reserve(
                event.app_id,
                event.shuffle_id,
                "",
                info.num_partitions,
                info.replicate,
                revived=placed,
                key_tag=_key_tag(state, event.app_id),
            )
            for wid in (w for w in (event.primary, event.replica) if w is not None):
                out += _addressed(state, wid, dict(event.incarnations), message)
    return out


def shuffle_reserves(
    state: MasterState, app_id: str, shuffle_id: int, incarnations: dict[str, str] | None = None
) -> list[Send]:
    """The epoch-0 ``RESERVE`` of each worker of a placed shuffle (none if it is unknown)."""
    info = state.shuffle(app_id, shuffle_id)
    if info is None:
        return []
    known = dict(info.incarnations) if incarnations is None else incarnations
    message = Reserve(
        app_id,
        shuffle_id,
        "",
        info.num_partitions,
        info.replicate,
        pairs=info.pairs,
        key_tag=_key_tag(state, app_id),
    )
    out: list[Send] = []
    for wid in sorted({w for pair in info.pairs for w in pair if w is not None}):
        out += _addressed(state, wid, known, message)
    return out


def _key_tag(state: MasterState, app_id: str) -> str | None:
    """The key tag of ``app_id``'s registration, or None (none, or registered before tags)."""
    app = state.apps.get(app_id)
    return app.key_tag if app is not None and app.key_tag else None


def _addressed(state: MasterState, wid: str, incarnations: dict[str, str], message: Reserve) -> list[Send]:
    """``message`` for ``wid``, with the incarnation it was placed on, or nothing if it is lost."""
    worker = state.workers.get(wid)
    if worker is None or worker.status == WorkerStatus.LOST:
        return []
    incarnation = incarnations.get(wid, worker.incarnation)
    url = f"tcp://{worker.host}:{worker.control_port}"
    peers = _peers(state, wid, message)
    return [(wid, url, dataclasses.replace(message, incarnation=incarnation, peers=peers))]


def _peers(state: MasterState, wid: str, message: Reserve) -> tuple[tuple[str, str], ...]:
    """The replicate URL of every replica ``wid`` forwards to in ``message``, as registered:
    the worker refuses a PUSH naming any other URL for them (PROTOCOL §5.2)."""
    replicas = {r for p, r in message.pairs if p == wid and r is not None}
    replicas |= {r for _, _, p, r in message.revived if p == wid and r is not None}
    out = []
    for replica in sorted(replicas):
        peer = state.workers.get(replica)
        if peer is not None:
            # the form of WorkerAddress.replicate_url, which writers put in their pushes
            out.append((replica, f"tcp://{peer.host}:{peer.replicate_port}"))
    return tuple(out)


class ReservationSender:
    """Parameters:
    timeout: how long a reply waits for the workers' acks.
    curve: talk CURVE to the workers, with this server key.
    signer: the member signer of ``RESERVE`` (PROTOCOL §2.1); None = unsigned.
    """

    def __init__(
        self,
        *,
        timeout: float = RESERVE_TIMEOUT,
        curve: CurveClient | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._client = AsyncRpcClient(timeout=timeout, name="master-reserve", curve=curve, signer=signer)
        self._client.start()

    def stop(self) -> None:
        """Stop the client; the replies still waiting are released at once."""
        self._client.stop()

    def send(self, sends: list[Send], done: Callable[[], None]) -> None:
        """Send every ``RESERVE`` (any thread); ``done`` runs once all were answered or timed out."""
        if not sends:
            done()
            return
        lock = threading.Lock()
        remaining = [len(sends)]

        def answered(worker: str, reserve: Reserve) -> Callable[[Reply | None, CroupierError | None], None]:
            def callback(reply: Reply | None, error: CroupierError | None) -> None:
                if error is not None:
                    log.warning(
                        "worker %s did not take its reservation of %s/%s: %s (its pushes will be refused)",
                        worker,
                        reserve.app_id,
                        reserve.shuffle_id,
                        error,
                        extra=key_fields(reserve),
                    )
                with lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    done()

            return callback

        for worker, url, reserve in sends:
            self._client.send(url, MsgType.RESERVE, to_json(reserve), [], answered(worker, reserve))
