"""croupier.core: pure domain logic (stdlib only).

No sockets, threads, clocks, files or ZooKeeper here: time and randomness are
passed in, so every decision can be replayed and property-tested.
"""
