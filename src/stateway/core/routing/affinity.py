"""Cache affinity: which candidate served a chain last, so its continuation goes there
while that server still holds the chain's prefix in its KV cache.

A chain is named by what a continuation carries: the ``previous_response_id`` (the
response that was served), the conversation, the ``prompt_cache_key``, or the client's
session (a header naming it: :mod:`stateway.surfaces.http.sessions`), each within its
tenant: a key another tenant happens to send (or sends on purpose) names a chain of its
own, neither led onto the server holding the first tenant's prefix nor moving it. The
table is this process's, bounded (least recently used names leave first). A continuation whose
names it does not hold (after a restart, on another replica, or evicted) falls back to the
store: every response keeps the candidate that served it (``served_by``), read with the
chain (or the conversation's items) in the statement that loads it. A chain known only
by its ``prompt_cache_key`` or session has no such fallback (the store is not searched by
them), and without any of these it is a new chain, spread by weight.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

DEFAULT_SIZE = 100_000


class AffinityTable:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._served: OrderedDict[str, str] = OrderedDict()

    def lookup(self, names: Iterable[str]) -> str | None:
        """The candidate key that last served the first name known."""
        for name in names:
            key = self._served.get(name)
            if key is not None:
                self._served.move_to_end(name)
                return key
        return None

    def remember(self, names: Iterable[str], key: str) -> None:
        for name in names:
            self._served[name] = key
            self._served.move_to_end(name)
        while len(self._served) > self._size:
            self._served.popitem(last=False)


def chain_names(
    tenant_id: str,
    previous_response_id: str | None,
    conversation_id: str | None,
    prompt_cache_key: str | None,
    session: str | None = None,
) -> list[str]:
    """The names a request's chain is known by in ``tenant_id``, most specific first (a
    tenant id holds no ``/``: the first one ends it)."""
    names = []
    if previous_response_id is not None:
        names.append(f"{tenant_id}/response:{previous_response_id}")
    if conversation_id is not None:
        names.append(f"{tenant_id}/conversation:{conversation_id}")
    if prompt_cache_key is not None:
        names.append(f"{tenant_id}/cache_key:{prompt_cache_key}")
    if session is not None:
        names.append(f"{tenant_id}/session:{session}")
    return names
