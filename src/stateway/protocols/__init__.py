"""Protocols: wire <-> canonical, one package per client protocol."""
