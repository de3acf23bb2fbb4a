"""croupier.actors."""
