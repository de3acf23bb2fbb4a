"""Tests of croupier.transports."""
