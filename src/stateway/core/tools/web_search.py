"""Web search as a gateway tool: the function the model is offered, the
``web_search_call`` item, the results the model is given, and ``url_citation``
annotations on the answer."""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import suppress
from typing import Final
from urllib.parse import quote, unquote_to_bytes, urlsplit

import orjson

from stateway.core.ids import new_id
from stateway.core.items import WEB_SEARCH_CALL, Item
from stateway.core.tools.catalog import Entry
from stateway.core.tools.model_names import WEB_SEARCH_FUNCTION
from stateway.core.tools.ports import INVALID_PARAMS, SearchHit, ToolError, ToolFailure

FUNCTION: Final[Item] = {
    "type": "function",
    "name": WEB_SEARCH_FUNCTION,
    "description": (
        "Search the web. Returns numbered results with title, URL and snippet; cite the "
        "URLs of the results you use."
    ),
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The search query."}},
        "required": ["query"],
        "additionalProperties": False,
    },
}


MAX_USES_EXCEEDED: Final = "max_uses_exceeded"
"""The cause of a search past the declared ``max_uses`` (Anthropic's code for it)."""
INVALID_TOOL_INPUT: Final = "invalid_tool_input"
"""The cause of a search without a query."""
TOO_MANY_REQUESTS: Final = "too_many_requests"
"""The cause of a search the provider rate limited (HTTP 429)."""
UNAVAILABLE: Final = "unavailable"
"""The cause of any other failure."""
ERROR_CODES: Final = frozenset(
    {
        INVALID_TOOL_INPUT,
        UNAVAILABLE,
        MAX_USES_EXCEEDED,
        TOO_MANY_REQUESTS,
        "query_too_long",
        "request_too_large",
    }
)
"""Anthropic's codes of a failed search (its SDK's ``WebSearchToolResultErrorCode``): the
causes a failed ``web_search_call``'s ``error`` may start with. The gateway gives the named
four (it truncates a query over a provider's limit rather than failing it); the others come
only in a client's earlier turn, sent back."""


def over_max_uses(cap: int) -> ToolError:
    """The error of a search past ``max_uses``: the call fails, the model is told why."""
    searches = "web search" if cap == 1 else "web searches"
    return ToolError(f"this response may run at most {cap} {searches}.", cause=MAX_USES_EXCEEDED)


def fail(item: Item, error: ToolError) -> None:
    """Close a search as failed. Its ``error`` is the message, after the code of its
    :func:`cause` where one is known: no field of the item is added for it (the Responses
    API's ``web_search_call`` has none), and the string is stored, replayed and sent back
    by a Messages client (as the code alone) unchanged; :func:`error_code` reads it."""
    item["status"] = "failed"
    code = cause(error)
    item["error"] = f"{code}: {error.message}" if code else error.message


def cause(error: ToolError) -> str | None:
    """A failed search's cause, where one is known: the one its error carries (a search
    past ``max_uses``), else the one its kind and code name (no query: ``INVALID_PARAMS``;
    the provider's HTTP 429)."""
    if error.cause is not None:
        return error.cause
    if error.kind == "protocol" and error.code == INVALID_PARAMS:
        return INVALID_TOOL_INPUT
    if error.kind == "http" and error.code == 429:
        return TOO_MANY_REQUESTS
    return None


def error_code(error: object) -> str:
    """A failed search's cause, from its item's ``error`` (the item, stored, relayed or
    sent back, has no other field for it): the code it starts with (:func:`fail`; a
    client's sent back is the code alone), else ``unavailable``."""
    code = error.partition(":")[0] if isinstance(error, str) else ""
    return code if code in ERROR_CODES else UNAVAILABLE


def domain_name(raw: str) -> str:
    """The host name a filter's entry names (:func:`domain_scope`); empty when it names
    none (``""``, ``*.``, ``https://``), which the protocols refuse."""
    return domain_scope(raw)[0]


def domain_scope(raw: str) -> tuple[str, str]:
    """The host name and path a filter's entry names, read leniently:
    ``https://Docs.Example.com/x/`` is ``("docs.example.com", "/x")``, ``*.example.com``
    ``("example.com", "")`` (the whole site), ``example.com/blog/*`` ``("example.com",
    "/blog")`` (Anthropic's filters take subpaths); the host is empty when it names none."""
    entry = raw.strip()
    if "://" in entry:
        try:
            parts = urlsplit(entry)
            host, path = parts.hostname or "", parts.path
        except ValueError:
            return "", ""
    else:
        host, slash, rest = entry.partition("/")
        path = slash + rest.split("?", 1)[0].split("#", 1)[0]
    host = host.lower().removeprefix("*.").strip(".")
    return host, path.rstrip("*").rstrip("/")


def entry(declared: Item) -> Entry:
    """The gateway's search, as the function ``web_search`` (offered apart beside a tool
    of that name: :meth:`~.catalog.Catalog.add`)."""
    return Entry(kind="web_search", function=FUNCTION, tool=declared)


def call_item() -> Item:
    return {
        "id": new_id("ws"),
        "type": WEB_SEARCH_CALL,
        "status": "in_progress",
        "action": {"type": "search", "query": ""},
    }


def query_of(arguments: str) -> str:
    try:
        parsed = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        parsed = None
    query = parsed.get("query") if isinstance(parsed, dict) else None
    if not isinstance(query, str) or not query.strip():
        raise ToolFailure(
            ToolError.protocol(INVALID_PARAMS, "A web search needs a non-empty 'query'.")
        )
    return query.strip()


def show_query(item: Item, arguments: str) -> None:
    """Put the query of a call that is not run into its item's ``action`` (left empty when
    the arguments hold none), as a call that runs shows it."""
    with suppress(ToolFailure):
        item["action"]["query"] = query_of(arguments)


def sources(hits: list[SearchHit]) -> list[Item]:
    """Hits as the item's ``action.sources`` (title and snippet kept: a later turn replays
    exactly what the model was given)."""
    return [{"type": "url", "url": h.url, "title": h.title, "snippet": h.snippet} for h in hits]


def turn_searches(context: Iterable[Item]) -> list[Item]:
    """The ``web_search_call`` items made since the user last spoke, in order: a turn that
    a client's output continues after a mixed round (a search beside a client call) cites
    them, as the response that ran them would have."""
    found: list[Item] = []
    for item in reversed(list(context)):
        if item.get("role") == "user":
            break
        if item.get("type") == WEB_SEARCH_CALL:
            found.append(item)
    found.reverse()
    return found


def turn_sources(context: list[Item]) -> list[Item]:
    """The results of the searches made since the user last spoke
    (:func:`turn_searches`)."""
    found: list[Item] = []
    for item in turn_searches(context):
        action = item.get("action")
        sources = action.get("sources") if isinstance(action, dict) else None
        if isinstance(sources, list):
            found += [source for source in sources if isinstance(source, dict)]
    return found


_URL_CHARACTERS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
"""What may follow a URL's start in the text and still be part of it (RFC 3986's
characters)."""
_URL_ENDINGS: Final = ".,;:!?'\")]}*/"
"""URL characters that, only followed by more of them, end a sentence or close a bracket
or quote after a URL rather than continue it (and a trailing slash: the same page)."""
_URL_START: Final = re.compile(r"https?://", re.IGNORECASE)


def citations(text: str, found: list[Item]) -> list[Item]:
    """``url_citation`` annotations for each place ``text`` names a source's URL: the URL
    whole (``https://a.test`` is not cited where the text names ``https://a.test/pricing``,
    another page), before any punctuation that ends it; a source's trailing slash may be
    left out (``https://a.test/`` is cited where the text names ``https://a.test``, the
    same page), and its non-ASCII characters named encoded or not (``https://a.test/Zürich``
    where the source's is ``https://a.test/Z%C3%BCrich``, or the other way); the
    annotation's ``url`` the source's, its indices in characters (code points)."""
    out: list[Item] = []
    for source in found:
        url = source.get("url")
        if not isinstance(url, str) or not url:
            continue
        for named in _spellings(url):
            start = text.find(named)
            while start != -1:
                end = start + len(named)
                if _url_ends(text, end):
                    out.append(
                        {
                            "type": "url_citation",
                            "start_index": start,
                            "end_index": end,
                            "url": url,
                            "title": source.get("title") or url,
                        }
                    )
                start = text.find(named, end)
    out.sort(key=lambda a: (a["start_index"], -a["end_index"]))
    kept: list[Item] = []
    for annotation in out:  # a URL inside a longer one cited at the same place: the longer
        if not kept or annotation["start_index"] >= kept[-1]["end_index"]:
            kept.append(annotation)
    return kept


def _spellings(url: str) -> list[str]:
    """How a text may name a source's URL: as given, and with its non-ASCII characters the
    other way (:func:`_other_way`); each also without its trailing slashes (when a host
    remains)."""
    found: list[str] = []
    for spelled in dict.fromkeys((url, _other_way(url))):
        bare = spelled.rstrip("/")
        scheme = _URL_START.match(bare)
        found.append(spelled)
        if bare != spelled and scheme is not None and scheme.end() < len(bare):
            found.append(bare)
    return found


_ENCODED_NON_ASCII: Final = re.compile(r"(?:%[89A-Fa-f][0-9A-Fa-f])+")
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")


def _other_way(url: str) -> str:
    """``url`` with its non-ASCII characters encoded where it holds them, else decoded
    where it encodes them as UTF-8: ``https://a.test/Zürich`` and
    ``https://a.test/Z%C3%BCrich`` are one page (RFC 3987's mapping between an IRI and a
    URI, which leaves every ASCII character, ``%2F`` among them, as it is)."""
    if _NON_ASCII.search(url):
        return _NON_ASCII.sub(lambda found: quote(found.group(), safe=""), url)
    return _ENCODED_NON_ASCII.sub(_decoded, url)


def _decoded(encoded: re.Match[str]) -> str:
    try:
        return unquote_to_bytes(encoded.group()).decode()
    except UnicodeDecodeError:  # not UTF-8: left encoded
        return encoded.group()


def _url_ends(text: str, end: int) -> bool:
    """Whether a URL named in ``text`` ends at ``end``: what follows is not more of it
    (nothing, a space, closing punctuation, a trailing slash, or another URL)."""
    if _URL_START.match(text, end):
        return True
    rest = _URL_CHARACTERS.match(text, end)
    return rest is None or not rest.group().rstrip(_URL_ENDINGS)
