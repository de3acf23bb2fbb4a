"""Tools around the service: ``croupier demo``, ``croupier bench`` and the bare-pipeline ceiling.

They may import every other folder; nothing in core, transports, storage, ha or actors
imports them (DESIGN §3).
"""
