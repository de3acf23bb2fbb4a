"""croupier.transports."""
