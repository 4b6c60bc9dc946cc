"""From a provider's parsed results to the hits the model sees: only ``http(s)`` URLs, only
the allowed domains and none of the blocked ones, each URL once, at most the requested
number, in the provider's order.

Every provider's answer passes through :func:`select_hits`, so the three behave alike even
where an API cannot filter by domain itself (SearXNG, Brave) or repeats a page that several
of its engines found (SearXNG).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

from stateway.core.tools.ports import INVALID_PARAMS, SearchHit, SearchQuery, ToolError, ToolFailure
from stateway.core.tools.web_search import domain_name


def query_text(query: SearchQuery) -> str:
    """The query to send; an empty one fails here (as bad arguments: ``INVALID_PARAMS``)
    rather than as the API's own 4xx."""
    text = query.query.strip()
    if not text:
        raise ToolFailure(ToolError.protocol(INVALID_PARAMS, "the web search query is empty"))
    return text


def select_hits(hits: Iterable[SearchHit], query: SearchQuery, limit: int) -> list[SearchHit]:
    """The first ``min(limit, query.max_results)`` distinct, allowed, unblocked hits of
    ``hits``."""
    wanted = min(limit, query.max_results)
    domains = normalize_domains(query.allowed_domains)
    if query.allowed_domains and not domains:
        return []  # an allow-list naming no domain allows none, never every one
    blocked = normalize_domains(query.blocked_domains)
    seen: set[str] = set()
    chosen: list[SearchHit] = []
    for hit in hits:
        if len(chosen) >= wanted:
            break
        key = _identity(hit.url)
        if key is None or key in seen:
            continue
        host = urlsplit(hit.url.strip()).hostname or ""
        if (domains and not host_allowed(host, domains)) or host_allowed(host, blocked):
            continue
        seen.add(key)
        url = hit.url.strip()  # as compared: the model cites it, the client opens it
        chosen.append(hit if url == hit.url else replace(hit, url=url))
    return chosen


def text_field(value: object) -> str:
    """A provider's text field as a plain string (absent or not a string: empty)."""
    return value.strip() if isinstance(value, str) else ""


def normalize_domains(domains: Iterable[str]) -> tuple[str, ...]:
    """Lower-cased bare host names (:func:`.web_search.domain_name`); entries naming none
    are left out."""
    return tuple(name for name in map(domain_name, domains) if name)


def host_allowed(host: str, domains: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one (``docs.example.com``
    matches ``example.com``; ``notexample.com`` does not)."""
    host = host.lower().rstrip(".")
    return any(host == domain or host.endswith("." + domain) for domain in domains)


def _identity(url: str) -> str | None:
    """The URL as compared for duplicates (no fragment, lower-cased scheme and host, no
    trailing slash); None for anything but an absolute ``http(s)`` URL."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def content_results(answer: object, provider: str) -> list[SearchHit]:
    """``results[]`` of an answer whose entries carry ``title``, ``url`` and ``content`` (the
    SearXNG and Tavily shape) as hits; entries without a URL are skipped."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise ToolFailure(f"{provider} returned an unexpected answer (no results list)")
    return [
        SearchHit(
            title=text_field(item.get("title")),
            url=item["url"],
            snippet=text_field(item.get("content")),
        )
        for item in results
        if isinstance(item, dict) and isinstance(item.get("url"), str)
    ]
