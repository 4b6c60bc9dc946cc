"""Tavily, a search API built for LLM agents.

Confirmed against Tavily's API reference (docs.tavily.com, "Introduction" and
"POST /search"): ``POST https://api.tavily.com/search`` with ``Authorization: Bearer <key>``
and a JSON body ``{"query", "max_results" (0..20, default 5), "include_domains" [...],
"search_depth", ...}``. The answer is ``{"query", "answer", "images", "results": [{"title",
"url", "content", "score", ...}], "response_time"}``. Errors: ``401`` for a missing or
invalid key, ``429`` rate limited, ``432``/``433`` a plan or pay-as-you-go limit reached.

``allowed_domains`` is sent as ``include_domains`` (their sites: a path is applied here) so
Tavily spends its results on them, and ``blocked_domains`` naming whole sites as
``exclude_domains``; the hits are still filtered here like every provider's.
"""

from __future__ import annotations

from typing import Any

from stateway.core.tools.ports import SearchHit, SearchQuery
from stateway.search.selection import (
    content_results,
    domain_scopes,
    normalize_domains,
    query_text,
    select_hits,
)
from stateway.search.transport import SearchTransport

NAME = "Tavily"
DEFAULT_BASE_URL = "https://api.tavily.com"
PATH = "/search"
MAX_RESULTS = 20
USAGE_LIMIT_STATUSES = frozenset({432, 433})


class TavilyProvider:
    name = "tavily"

    def __init__(self, *, api_key: str, base_url: str, max_results: int, timeout: float) -> None:
        self.endpoint = base_url.rstrip("/") + PATH
        self._max_results = max_results
        self._transport = SearchTransport(
            NAME,
            timeout=timeout,
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            secret=api_key,
            classify_error=_classify_error,
        )

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        wanted = min(self._max_results, query.max_results, MAX_RESULTS)
        if any(path for _, path in domain_scopes((*query.allowed_domains, *query.blocked_domains))):
            wanted = MAX_RESULTS  # headroom: paths are applied here, after Tavily's site filter
        body: dict[str, Any] = {"query": query_text(query), "max_results": wanted}
        domains = normalize_domains(query.allowed_domains)
        if domains:
            body["include_domains"] = list(domains)
        blocked = normalize_domains(query.blocked_domains, whole_sites=True)
        if blocked:
            body["exclude_domains"] = list(blocked)
        answer = await self._transport.post(self.endpoint, body)
        return select_hits(from_tavily(answer), query, self._max_results)

    async def aclose(self) -> None:
        await self._transport.aclose()


def from_tavily(answer: Any) -> list[SearchHit]:
    """``results[]`` of a Tavily answer as hits."""
    return content_results(answer, NAME)


def _classify_error(status: int, body: Any) -> str | None:
    if status in USAGE_LIMIT_STATUSES:
        return f"{NAME} usage limit of the API plan is reached (HTTP {status})"
    return None
