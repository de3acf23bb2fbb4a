"""Croupier: a remote shuffle service. The public SDK.

Kept light on purpose: every ``import croupier.core`` runs this file first, so
the SDK's names are exported lazily.
"""

from __future__ import annotations

__all__: list[str] = []
__version__ = "0.1.0"
