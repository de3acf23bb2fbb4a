"""croupier.services."""
