"""Adapters of the core's coordination ports (:mod:`stateway.core.coordination`).

``memory``: one process (the embedded default); ``redis``: processes sharing a Redis
server, so that replicas behind a load balancer deduplicate commands together and cancel
each other's background runs. Import the Redis ones from :mod:`.redis` (this package
does not, so a process that uses no Redis never loads the client).
"""

from stateway.coordination.memory import MemoryCommandResults

__all__ = ["MemoryCommandResults"]
