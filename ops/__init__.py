"""Operability: Prometheus metrics, the HTTP endpoint (``/metrics``, ``/api/v1``) and the status page.

Nothing below ``croupier.services`` imports this package: the services wrap their handlers
and logs with it (wiring only).
"""
