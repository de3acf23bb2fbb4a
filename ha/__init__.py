"""croupier.ha."""
