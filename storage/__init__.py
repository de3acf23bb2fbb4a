"""croupier.storage: a worker's partition data, on disk and in memory.

The ``PartitionStore`` port and its memory twin (``store``), the disk store (``disk``) with its
descriptor cache (``_fds``), directory health (``_dirs``) and index file codec (``index_file``),
the chunk index (``index``), the memory tier of small committed copies (``memory_tier``) and
the worker's memory budget (``limiter``).

Where the rest of the worker lives: the request handlers in ``dataplane/``; the partition and
flusher actors that write through the store in ``actors/``; the wiring in
``services/worker.py``.
"""
