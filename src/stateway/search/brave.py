"""Brave Search, through its Web Search API.

Confirmed against Brave's API reference (api-dashboard.search.brave.com, "Web search" and
"Response headers"): ``GET https://api.search.brave.com/res/v1/web/search?q=...&count=N``
with headers ``X-Subscription-Token: <key>`` and ``Accept: application/json``. ``count`` is
1..20 (default 20); ``q`` at most 400 characters. The answer is
``{"type": "search", "query": {...}, "web": {"results": [{"title", "url",
"description", "extra_snippets", ...}]}, ...}``; ``web`` is absent when nothing was found.
Titles and descriptions carry HTML: matched words in ``<strong>`` and entities such as
``&#x27;``, removed here. Errors are ``{"type": "ErrorResponse", "error": {"code",
"detail", "status"}}``; an invalid or missing key is ``422`` with code
``SUBSCRIPTION_TOKEN_INVALID`` (not 401), a spent quota or rate ``429``.
"""

from __future__ import annotations

import html
import re
from typing import Any

from stateway.core.tools.ports import SearchHit, SearchQuery, ToolFailure
from stateway.search.selection import query_text, select_hits, text_field
from stateway.search.transport import SearchTransport

NAME = "Brave Search"
DEFAULT_BASE_URL = "https://api.search.brave.com"
PATH = "/res/v1/web/search"
MAX_COUNT = 20
MAX_QUERY_CHARS = 400
INVALID_KEY_CODES = frozenset({"SUBSCRIPTION_TOKEN_INVALID"})

_TAG = re.compile(r"<[^>]*>")


class BraveProvider:
    name = "brave"

    def __init__(self, *, api_key: str, base_url: str, max_results: int, timeout: float) -> None:
        self.endpoint = base_url.rstrip("/") + PATH
        self._max_results = max_results
        self._transport = SearchTransport(
            NAME,
            timeout=timeout,
            headers={"X-Subscription-Token": api_key, "Accept": "application/json"},
            secret=api_key,
            classify_error=_classify_error,
        )

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        params = {"q": query_text(query)[:MAX_QUERY_CHARS], "count": str(self._count(query))}
        answer = await self._transport.get(self.endpoint, params)
        return select_hits(from_brave(answer), query, self._max_results)

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _count(self, query: SearchQuery) -> int:
        """Ask for more than needed when hits will be filtered by domain here."""
        wanted = min(self._max_results, query.max_results)
        filtered = query.allowed_domains or query.blocked_domains
        return MAX_COUNT if filtered else min(MAX_COUNT, max(wanted, 1))


def from_brave(answer: Any) -> list[SearchHit]:
    """``web.results[]`` of a Brave answer as hits, HTML removed from the text."""
    if not isinstance(answer, dict):
        raise ToolFailure(f"{NAME} returned an unexpected answer (not an object)")
    web = answer.get("web")
    if web is None:
        return []  # Brave leaves ``web`` out when it found nothing
    results = web.get("results") if isinstance(web, dict) else None
    if not isinstance(results, list):
        raise ToolFailure(f"{NAME} returned an unexpected answer (no web.results list)")
    return [
        SearchHit(
            title=strip_html(text_field(item.get("title"))),
            url=item["url"],
            snippet=strip_html(text_field(item.get("description"))),
        )
        for item in results
        if isinstance(item, dict) and isinstance(item.get("url"), str)
    ]


def strip_html(text: str) -> str:
    """``text`` without tags, entities decoded (``<strong>Brave</strong> &amp; co`` ->
    ``Brave & co``)."""
    return html.unescape(_TAG.sub("", text)).strip()


def _classify_error(status: int, body: Any) -> str | None:
    """Brave reports a bad key as 422 ``SUBSCRIPTION_TOKEN_INVALID``."""
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if code in INVALID_KEY_CODES:
        return f"{NAME} rejected the API key (HTTP {status})"
    return None
