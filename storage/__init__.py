"""croupier.storage."""
