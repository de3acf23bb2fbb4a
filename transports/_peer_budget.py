"""Per-peer reply budgets of an RPC server: bytes queued to each peer, bounded.

libzmq's high-water mark counts messages, whatever their size: a client that stops
reading could make a server hold 1,000 replies of 8 MiB. So the server counts, per
peer, the bytes of the large replies libzmq still holds (sent zero-copy with a
``MessageTracker``, which completes once libzmq has written or dropped them, e.g.
when the peer disconnects), plus the replies still to come for the requests it is
handling (``pending``), each guessed at the size of that peer's recent replies
(``estimate``: the largest, halved per reply, so a peer of small replies soon
costs nothing; a new peer starts at 1/16 of the cap, and a peer with nothing in flight
keeps its guess, for the 4,096 most recent such peers). Handlers may answer from other
threads, so without that guess a burst of requests read at once would all be admitted.

A peer at or over its cap gets no new requests handled: they are parked, up to the
cap's worth of request bytes too, and handled in order once its replies drain.
Requests beyond that are shed (the peer is not reading its replies anyway). A client
that stops reading stalls only itself. A peer that disconnects has its parked requests
dropped (``gone``): they are not handled for nobody.

State: owned by the RPC server's thread alone; nothing here is thread-safe.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import zmq

__all__ = ["DEFAULT_PEER_REPLY_BYTES", "PeerBudget"]

# Three 8 MiB fetch chunks in flight per reader, several readers per client process,
# and master replies of a few MiB: 64 MiB per peer leaves room for all of that.
DEFAULT_PEER_REPLY_BYTES = 64 * 1024 * 1024
# Reply-size guesses kept for peers with nothing in flight (the most recent ones): a
# pipelining client is idle between its windows, and must not start over at 1/16 of the cap.
_IDLE_PEERS = 4096


@dataclass(slots=True)
class _Peer:
    estimate: int
    pending: int = 0
    queued: int = 0
    sent: deque[tuple[zmq.MessageTracker, int]] = field(default_factory=deque)
    parked: deque[list[zmq.Frame]] = field(default_factory=deque)
    parked_bytes: int = 0


class PeerBudget:
    """Reply bytes queued per peer, and the requests parked while a peer is over its cap.

    Parameters:
        cap: bytes of unread replies a peer may have queued before its requests wait.

    Raises:
        ValueError: a cap under 1.
    """

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"the per-peer reply cap must be positive, got {cap}")
        self.cap = cap
        self._peers: dict[bytes, _Peer] = {}
        self._idle: OrderedDict[bytes, int] = OrderedDict()  # peer -> its estimate, newest last

    @property
    def busy(self) -> bool:
        """Whether some peer has replies in flight or requests parked (poll often then)."""
        return any(state.sent or state.parked for state in self._peers.values())

    def queued(self, peer: bytes) -> int:
        """Bytes of ``peer``'s replies that libzmq still holds."""
        state = self._peers.get(peer)
        return state.queued if state is not None else 0

    def over(self, peer: bytes) -> bool:
        """Whether ``peer``'s requests must wait: over its cap, or others already wait."""
        state = self._peers.get(peer)
        return state is not None and (bool(state.parked) or self._full(state))

    def _full(self, state: _Peer) -> bool:
        return state.queued + state.pending * state.estimate >= self.cap

    def _state(self, peer: bytes) -> _Peer:
        state = self._peers.get(peer)
        if state is None:
            estimate = self._idle.pop(peer, self.cap // 16)
            state = self._peers[peer] = _Peer(estimate=estimate)
        return state

    def admitted(self, peer: bytes) -> None:
        """A request of ``peer`` goes to the handler: its reply is to come."""
        self._state(peer).pending += 1

    def replied(self, peer: bytes, size: int) -> None:
        """A reply of ``size`` bytes to ``peer`` is being sent (counted whether or not it is tracked)."""
        state = self._peers.get(peer)
        if state is None:
            return
        # clamped: an OK reply that could not be sent is replaced by an error reply
        state.pending = max(0, state.pending - 1)
        state.estimate = max(size, state.estimate // 2)

    def charge(self, peer: bytes, tracker: zmq.MessageTracker, size: int) -> None:
        """Count a reply of ``size`` bytes to ``peer`` until ``tracker`` completes."""
        if tracker.done:
            return
        state = self._state(peer)
        state.sent.append((tracker, size))
        state.queued += size

    def park(self, peer: bytes, frames: list[zmq.Frame]) -> bool:
        """Hold a request of a peer that is over its cap; False when it must be shed."""
        state = self._state(peer)
        size = sum(len(f.buffer) for f in frames)
        if state.parked_bytes + size > self.cap:
            return False
        state.parked.append(frames)
        state.parked_bytes += size
        return True

    def reap(self) -> list[bytes]:
        """Forget completed replies; the peers that now have parked requests to run."""
        ready = []
        for peer, state in list(self._peers.items()):
            while state.sent and state.sent[0][0].done:
                state.queued -= state.sent.popleft()[1]
            if state.parked and not self._full(state):
                ready.append(peer)
            elif not (state.sent or state.parked or state.pending):
                del self._peers[peer]
                self._idle[peer] = state.estimate
                if len(self._idle) > _IDLE_PEERS:
                    self._idle.popitem(last=False)
        return ready

    def gone(self, peer: bytes) -> int:
        """``peer`` has disconnected: drop its parked requests (no reply could reach it, so
        handling them would only burn the server's CPU); how many were dropped."""
        state = self._peers.get(peer)
        if state is None:
            return 0
        dropped = len(state.parked)
        state.parked.clear()
        state.parked_bytes = 0
        return dropped

    def unpark(self, peer: bytes) -> list[zmq.Frame] | None:
        """The next parked request of ``peer`` while it is under its cap, else None."""
        state = self._peers.get(peer)
        if state is None or not state.parked or self._full(state):
            return None
        frames = state.parked.popleft()
        state.parked_bytes -= sum(len(f.buffer) for f in frames)
        return frames
