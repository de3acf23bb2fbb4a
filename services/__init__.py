"""croupier.services: wiring only. Build a master (``master``, ``ha_master``), a worker
(``worker``), a local cluster (``local``), and the ``croupier`` command line (``cli/``, one
module per command group).

Where the parts they wire live: the master's actors in ``actors/``, its fold in ``core/``, its
logs and leadership in ``ha/``; the worker's handlers in ``dataplane/`` and its files in
``storage/``; metrics, HTTP and logs in ``ops/``; ``demo``, ``bench`` and ``verify`` in
``tools/``.
"""
