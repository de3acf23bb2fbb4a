"""The worker's data plane, one job per module; ``services/worker.py`` only wires them.

identity       this worker's id and incarnation; refuses requests naming another incarnation
locations      which ``PartitionActor`` owns each location, charged to the memory limiter; sealing a
               shuffle at commit; removal
reservations   the locations the master placed here (RESERVE); PUSH and REPLICATE are checked against them
push           PUSH and REPLICATE: parse, check placement and digests, admit against the memory limiter,
               deliver, replicate
throttle       per-app push rates over a sliding window; PUSH of an abnormal app is CONGESTED
commit         COMMIT_FILES: the reports of live locations and of committed files on disk
fetch          OPEN_STREAM and FETCH_CHUNK, reads on a thread pool
control        the control port: RESERVE, COMMIT_FILES, DESTROY (off the server thread), WORKER_INFO, PING
orphans        which held shuffles to ask the master about; drops those it no longer knows
registration   register with the master, then heartbeat
load           ``LoadSampler``: the disk and iowait figures of each heartbeat
"""
