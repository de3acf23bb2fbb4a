"""croupier.actors: the pykka actors, thin shells that hand their decisions to ``core``.

Master side: ``master_actor`` (every command, one at a time), ``app_actor`` (one per app),
``master_front`` (the master's RPC port), ``commit_coordinator`` and ``reservations`` (what the
master tells workers). Worker side: ``partition_actor`` (a shard of the locations), ``flusher``
(one per disk).

Where the rest of each part lives:
    the master   decisions and state fold in ``core/`` (``decide``, ``state``); its event logs,
                 election and leadership in ``ha/``; wired by ``services/master.py`` and
                 ``services/ha_master.py``.
    the worker   request handlers in ``dataplane/``; files, the memory limiter and the memory
                 tier in ``storage/``; wired by ``services/worker.py``.
"""
