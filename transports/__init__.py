"""croupier.transports: ZeroMQ and what travels over it.

The RPC server and blocking client (``rpc/``), the pipelined client (``async_rpc``), the socket
loop and cross-thread hand-off they share (``_loop``), framing (``_framing``), the master client
(``master_client``), signed requests and the cluster secret (``auth``, ``secret``), CURVE
(``curve``), batch digests (``digest``), the reply and connection budgets (``_peer_budget``,
``_conn_budget``, ``_zap``) and the request's log fields (``log_context``).

Where the rest lives: the wire format (headers, message types, bodies) in ``core/wire.py`` and
``core/codec.py``; the ZooKeeper leader lookup behind ``master_client``'s ``LeaderLookup`` port
in ``ha/leader_lookup.py``; the request handlers in ``dataplane/`` and ``actors/master_front.py``.
"""
