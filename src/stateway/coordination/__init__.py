"""Adapters of the core's coordination ports (:mod:`stateway.core.coordination`).

``memory``: one process (the embedded default); ``redis``: processes sharing a Redis
server, so that replicas behind a load balancer deduplicate commands together and cancel
each other's background runs.
"""

from stateway.coordination.memory import MemoryCommandResults
from stateway.coordination.redis import RedisCancelSignals, RedisCommandResults

__all__ = [
    "MemoryCommandResults",
    "RedisCancelSignals",
    "RedisCommandResults",
]
