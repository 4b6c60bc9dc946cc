"""SearXNG, the self-hosted metasearch engine, through its JSON API.

Confirmed against SearXNG's documentation (``docs/dev/search_api.rst``,
``docs/admin/settings/settings_search.rst``): ``GET {instance}/search?q=...&format=json``
answers ``{"query", "number_of_results", "results": [{"title", "url", "content",
"engine", ...}], "answers", "infoboxes", "suggestions", ...}``. No authentication. The API
has no result-count parameter (one page, about 20 hits), so the count is cut here. A format
not listed under ``search.formats`` in the instance's ``settings.yml`` is refused with
``403 Forbidden``, and the shipped settings list only ``html``: that 403 is reported with
the fix. SearXNG's bot limiter answers ``429``.
"""

from __future__ import annotations

from typing import Any

from stateway.core.tools.ports import SearchHit, SearchQuery
from stateway.search.selection import content_results, query_text, select_hits
from stateway.search.transport import SearchTransport

NAME = "SearXNG"
JSON_DISABLED = (
    "SearXNG refused the JSON format (HTTP 403): enable `json` in `search.formats` "
    "of the instance's settings.yml"
)


class SearxngProvider:
    name = "searxng"

    def __init__(self, *, url: str, max_results: int, timeout: float) -> None:
        self.endpoint = url.rstrip("/") + "/search"
        self._max_results = max_results
        self._transport = SearchTransport(
            NAME,
            timeout=timeout,
            headers={"Accept": "application/json"},
            classify_error=_classify_error,
        )

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        params = {"q": query_text(query), "format": "json"}
        answer = await self._transport.get(self.endpoint, params)
        return select_hits(from_searxng(answer), query, self._max_results)

    async def aclose(self) -> None:
        await self._transport.aclose()


def from_searxng(answer: Any) -> list[SearchHit]:
    """``results[]`` of a SearXNG JSON answer as hits (entries without a URL are skipped)."""
    return content_results(answer, NAME)


def _classify_error(status: int, body: Any) -> str | None:
    """403 is how SearXNG refuses a format its settings do not list."""
    return JSON_DISABLED if status == 403 else None
