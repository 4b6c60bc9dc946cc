"""From a provider's parsed results to the hits the model sees: only ``http(s)`` URLs, only
the allowed domains and none of the blocked ones (an entry naming a path, as Anthropic's
``example.com/blog``, only the pages under it), each URL once, at most the requested
number, in the provider's order; each one's title and snippet cut to a bound, and none
whose URL is longer than a browser takes.

Every provider's answer passes through :func:`select_hits`, so the three behave alike even
where an API cannot filter by domain itself (SearXNG, Brave) or repeats a page that several
of its engines found (SearXNG).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

from stateway.core.tools.ports import INVALID_PARAMS, SearchHit, SearchQuery, ToolError, ToolFailure
from stateway.core.tools.web_search import domain_scope

MAX_TITLE_CHARS = 1_000
MAX_SNIPPET_CHARS = 4_000
"""A chosen hit's title and snippet are cut to these: a provider's answer is capped only as
a whole (:data:`.transport.MAX_RESPONSE_BYTES`), and one hit's text could otherwise fill
the model's context and the stored item (real ones are a few hundred characters)."""
MAX_URL_CHARS = 8_192
"""A hit whose URL is longer is left out (cutting it would name another page): no browser
or server is required to take one (RFC 9110 recommends at least 8,000 octets)."""

Scope = tuple[str, str]
"""A filter entry's host name and path (``""``: the whole site)."""


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
    allowed = domain_scopes(query.allowed_domains)
    if query.allowed_domains and not allowed:
        return []  # an allow-list naming no domain allows none, never every one
    blocked = domain_scopes(query.blocked_domains)
    seen: set[str] = set()
    chosen: list[SearchHit] = []
    for hit in hits:
        if len(chosen) >= wanted:
            break
        key = _identity(hit.url) if len(hit.url) <= MAX_URL_CHARS else None
        if key is None or key in seen:
            continue
        url = hit.url.strip()  # as compared: the model cites it, the client opens it
        if (allowed and not in_scopes(url, allowed)) or in_scopes(url, blocked):
            continue
        seen.add(key)
        chosen.append(_clipped(hit, url))
    return chosen


def _clipped(hit: SearchHit, url: str) -> SearchHit:
    title, snippet = hit.title[:MAX_TITLE_CHARS], hit.snippet[:MAX_SNIPPET_CHARS]
    if (title, url, snippet) == (hit.title, hit.url, hit.snippet):
        return hit
    return replace(hit, title=title, url=url, snippet=snippet)


def text_field(value: object) -> str:
    """A provider's text field as a plain string (absent or not a string: empty)."""
    return value.strip() if isinstance(value, str) else ""


def domain_scopes(domains: Iterable[str]) -> tuple[Scope, ...]:
    """Each entry's host name and path (:func:`.web_search.domain_scope`); entries naming
    no host are left out."""
    return tuple(scope for scope in map(domain_scope, domains) if scope[0])


def normalize_domains(domains: Iterable[str], *, whole_sites: bool = False) -> tuple[str, ...]:
    """The lower-cased bare host names of ``domains``, each once, for an API that filters
    by site; entries naming none are left out, and with ``whole_sites`` those naming a
    path too (excluding their site would exclude more than they block)."""
    hosts = (host for host, path in domain_scopes(domains) if not (whole_sites and path))
    return tuple(dict.fromkeys(hosts))


def in_scopes(url: str, scopes: tuple[Scope, ...]) -> bool:
    """Whether ``url`` is on one of ``scopes``' hosts (or a subdomain) under its path
    (``/blog`` takes ``/blog`` and ``/blog/post``, not ``/blogger``)."""
    parts = urlsplit(url)
    host, path = parts.hostname or "", parts.path
    return any(
        host_allowed(host, (site,)) and (path == prefix or path.startswith(prefix + "/"))
        for site, prefix in scopes
    )


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
