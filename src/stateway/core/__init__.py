"""The core: one command handler over canonical items, runs and ports.

Nothing here imports a web framework, a wire model of a client protocol, a database
driver or an HTTP client. Surfaces and protocols translate at the edge; backends and
storage implement the ports in :mod:`stateway.core.ports`.
"""
