"""croupier.ha: the master's durability and high availability.

Event logs (the port in ``eventlog``; ``filelog``, ``zklog`` with one ZooKeeper job per module:
``zkbatch``, ``zkcalls``, ``zkfence``, ``zkwriter``, ``zksnapshot``), snapshots and recovery,
group commit, ``timedlog`` (appends timed for the metrics), leader election and leadership
(``election``, ``leadership``, ``roles``, ``standby``), the leader lookup that clients of a
``zk://`` URL use (``leader_lookup``) and a local ZooKeeper for tests and ``--ha`` (``zkserver``).

Where the rest lives: the leader record's format in ``core/leader_record.py``; the HA master is
wired by ``services/ha_master.py``; ``transports/master_client.py`` declares the
``LeaderLookup`` port that ``leader_lookup`` fills (entry point ``croupier.leader_lookups``).
"""
