"""Web search items: the call a client reads, the query the model must give, the sources kept
on the item, and ``url_citation`` annotations on the answer."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import ResponseFunctionWebSearch
from openai.types.responses.response_output_text import AnnotationURLCitation

from stateway.core.tools import web_search
from stateway.core.tools.ports import (
    GATEWAY_REFUSED,
    INVALID_PARAMS,
    REQUEST_TIMEOUT,
    SearchHit,
    ToolError,
    ToolFailure,
)
from tests.core.tools.wire import is_id, sdk_item

A = "https://a.test"
A_DOCS = "https://a.test/docs"
B = "https://b.test"


def source(url: str, title: str | None = None) -> dict[str, Any]:
    return {"type": "url", "url": url, "title": title, "snippet": ""}


def cited(text: str, found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each citation as the text it covers and its title (checked against the SDK type)."""
    out = []
    for annotation in web_search.citations(text, found):
        AnnotationURLCitation.model_validate(annotation, strict=True)
        covered = text[annotation["start_index"] : annotation["end_index"]]
        assert covered in (annotation["url"], annotation["url"].rstrip("/"))
        out.append((covered, annotation["title"]))
    return out


def test_a_search_starts_in_progress_with_an_empty_query() -> None:
    item = web_search.call_item()
    assert is_id(item["id"], "ws")
    assert item == {
        "id": item["id"],
        "type": "web_search_call",
        "status": "in_progress",
        "action": {"type": "search", "query": ""},
    }
    assert isinstance(sdk_item(item), ResponseFunctionWebSearch)


def test_the_model_is_offered_one_search_function_of_a_query() -> None:
    declared = {"type": "web_search", "filters": {"allowed_domains": ["a.test"]}}
    entry = web_search.entry(declared)
    assert (entry.kind, entry.tool) == ("web_search", declared)
    assert entry.function["name"] == "web_search"
    assert entry.function["parameters"]["required"] == ["query"]


def test_hits_become_sources_with_what_the_model_was_given() -> None:
    found = web_search.sources([SearchHit("A", A, "about a"), SearchHit("B", B)])
    assert found == [
        {"type": "url", "url": A, "title": "A", "snippet": "about a"},
        {"type": "url", "url": B, "title": "B", "snippet": ""},
    ]
    item = {**web_search.call_item(), "status": "completed"}
    item["action"] = {"type": "search", "query": "q", "sources": found}
    assert isinstance(sdk_item(item), ResponseFunctionWebSearch)


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (ToolError.http(429, "rate limited"), "too_many_requests: rate limited"),
        (ToolError.protocol(INVALID_PARAMS, "no query"), "invalid_tool_input: no query"),
        (ToolError.http(503, "unavailable (HTTP 503)"), "unavailable (HTTP 503)"),
        (ToolError("max_uses_exceeded: at most 1"), "max_uses_exceeded: at most 1"),
    ],
)
def test_a_failed_search_keeps_its_cause_where_its_error_starts(
    error: ToolError, kept: str
) -> None:
    """No field of its own: the item stays what the SDK reads, the ``error`` it already
    had aside."""
    item = {**web_search.call_item(), "status": "failed"}
    web_search.fail(item, error)
    assert item["error"] == kept
    assert set(item) == {"id", "type", "status", "action", "error"}
    assert isinstance(sdk_item(item), ResponseFunctionWebSearch)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (ToolError.http(429, "rate limited"), "too_many_requests"),
        (ToolError.protocol(INVALID_PARAMS, "no query"), "invalid_tool_input"),
        (ToolError("at most 1", cause="max_uses_exceeded"), "max_uses_exceeded"),
        (ToolError("down", "http", 503, cause="too_many_requests"), "too_many_requests"),
        (ToolError.http(503, "unavailable (HTTP 503)"), None),
        (ToolError.protocol(REQUEST_TIMEOUT, "timed out"), None),
        (ToolError.protocol(GATEWAY_REFUSED, "max_tool_calls"), None),
        (ToolError("too_many_requests: words only"), None),  # a message names no cause
    ],
)
def test_a_failed_searchs_cause_is_what_its_error_carries(
    error: ToolError, cause: str | None
) -> None:
    """Its own (``cause``), else its kind and code: never its message's words. The item's
    ``error`` then names it, for :func:`web_search.error_code` to read back."""
    assert web_search.cause(error) == cause
    if cause is not None:
        item = web_search.call_item()
        web_search.fail(item, error)
        assert item["error"] == f"{cause}: {error.message}"
        assert web_search.error_code(item["error"]) == cause


def test_a_search_past_max_uses_carries_its_cause_beside_its_message() -> None:
    error = web_search.over_max_uses(2)
    assert error.cause == "max_uses_exceeded"
    assert error.message == "this response may run at most 2 web searches."
    item = web_search.call_item()
    web_search.fail(item, error)
    assert item["error"] == "max_uses_exceeded: this response may run at most 2 web searches."


def test_a_cap_of_one_search_is_worded_in_the_singular() -> None:
    assert web_search.over_max_uses(1).message == "this response may run at most 1 web search."


def test_a_call_not_run_shows_its_query_or_none() -> None:
    item = web_search.call_item()
    web_search.show_query(item, "{}")
    assert item["action"] == {"type": "search", "query": ""}
    web_search.show_query(item, '{"query": " what is stateway "}')
    assert item["action"] == {"type": "search", "query": "what is stateway"}


def test_the_query_is_the_trimmed_query_argument() -> None:
    assert web_search.query_of('{"query": "  what is stateway \\n"}') == "what is stateway"


@pytest.mark.parametrize(
    "arguments", ["", "  ", "{", '["q"]', '{"query": "  "}', '{"query": 3}', "{}"]
)
def test_a_search_without_a_query_fails_and_says_why(arguments: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        web_search.query_of(arguments)
    assert caught.value.message == "A web search needs a non-empty 'query'."
    assert caught.value.error == ToolError.protocol(INVALID_PARAMS, caught.value.message)


def test_each_place_the_answer_names_a_source_is_cited_in_order() -> None:
    text = f"See {B} and {A}, then {B}, and again {B}."
    assert cited(text, [source(A, "A"), source(B)]) == [(B, B), (A, "A"), (B, B), (B, B)]


def test_a_source_without_a_url_is_skipped() -> None:
    assert cited(f"See {A}.", [{"type": "url", "title": "none"}, source(A, "A")]) == [(A, "A")]
    assert cited(f"See {A}.", [{"type": "url", "url": ""}, source(A, "A")]) == [(A, "A")]


def test_a_url_inside_a_longer_cited_one_is_not_cited_again() -> None:
    text = f"See {A_DOCS} then {A}."
    assert cited(text, [source(A, "home"), source(A_DOCS, "docs")]) == [
        (A_DOCS, "docs"),
        (A, "home"),
    ]


def test_of_sources_cited_at_one_place_the_longer_is_kept() -> None:
    """A hit's URL and another's with a trailing slash both end where the text names the
    latter: it is cited once, as the URL it names."""
    text = f"See {A}/ now."
    for found in ([source(A, "home"), source(f"{A}/", "slash")], [source(f"{A}/", "slash")]):
        assert cited(text, found) == [(f"{A}/", "slash")]
    assert cited(text, [source(A, "home")]) == [(A, "home")]


@pytest.mark.parametrize("text", [f"See {A} now.", f"See {A}.", f"[home]({A})", A_DOCS])
def test_a_source_with_a_trailing_slash_is_cited_where_the_text_leaves_it_out(text: str) -> None:
    """A provider gives a site's home page as ``https://a.test/``; a model names it
    ``https://a.test``: the same page (as :mod:`stateway.search.selection` compares them),
    cited; a longer URL it begins is still another page."""
    expected = [] if text == A_DOCS else [(A, "home")]
    assert cited(text, [source(f"{A}/", "home")]) == expected
    assert cited(f"{A_DOCS} and {A_DOCS}/", [source(f"{A_DOCS}/", "docs")]) == [
        (A_DOCS, "docs"),
        (f"{A_DOCS}/", "docs"),
    ]


def test_citations_may_touch() -> None:
    assert cited(A + B, [source(A), source(B)]) == [(A, A), (B, B)]


@pytest.mark.parametrize(
    "text",
    [
        f"See {A}/pricing for the plans.",  # a source's URL begins a longer one
        f"See {A_DOCS}2 and {A_DOCS}.html.",
        f"See {A_DOCS}?page=2 or {A_DOCS}#install",
        f"{A}/pricing is the plans' page.",  # the text starts with a URL
    ],
)
def test_a_source_is_not_cited_where_the_text_names_a_longer_url(text: str) -> None:
    """A URL the text names is that page, not the shorter one it begins with: a hit on a
    site's home page (``https://a.test``) is not cited for every page of the site."""
    assert cited(text, [source(A, "home"), source(A_DOCS, "docs")]) == []


@pytest.mark.parametrize(
    "text",
    [
        f"See {A_DOCS}.",
        f"Read it ({A_DOCS}), then decide; or {A_DOCS}! Really: {A_DOCS}?",
        f"[the docs]({A_DOCS}) and <{A_DOCS}> and '{A_DOCS}'",
        f"See {A_DOCS}/ (with its slash).",
        f"{A_DOCS}",
    ],
)
def test_a_source_is_cited_before_punctuation_that_ends_its_url(text: str) -> None:
    found = cited(text, [source(A_DOCS, "docs")])
    assert found
    assert set(found) == {(A_DOCS, "docs")}


ZURICH = "https://de.wikipedia.org/wiki/Z%C3%BCrich_%F0%9F%98%80"
ZURICH_IRI = "https://de.wikipedia.org/wiki/Zürich_😀"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        (ZURICH, ZURICH_IRI),  # a provider's encoded URL, named as people write it
        (ZURICH_IRI, ZURICH),  # a provider's IRI, named encoded
        (f"{ZURICH}/", ZURICH_IRI),  # its trailing slash left out too
    ],
)
def test_a_source_is_cited_where_the_text_names_its_non_ascii_characters_either_way(
    url: str, named: str
) -> None:
    """``https://…/Z%C3%BCrich`` and ``https://…/Zürich`` are one page (RFC 3987's mapping of
    an IRI to a URI encodes only its non-ASCII characters): cited where the text names
    either, the span counted in characters (``text[start:end]`` is the name, after
    non-ASCII text and an emoji), the annotation's ``url`` the source's."""
    text = f"Grüezi 😀 — siehe {named}。 Und {named}, ok."
    annotations = web_search.citations(text, [source(url, "Zürich")])
    spans = [text[a["start_index"] : a["end_index"]] for a in annotations]
    assert spans == [named, named]
    assert {a["url"] for a in annotations} == {url}


def test_only_non_ascii_characters_are_read_either_way() -> None:
    """``%2F`` is a character of the path's segment, not a slash: another page."""
    assert web_search.citations("See https://a.test/a/b.", [source("https://a.test/a%2Fb")]) == []


USER = {"type": "message", "role": "user", "content": "and now?"}


def search(*urls: str) -> dict[str, Any]:
    return {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": [source(url) for url in urls]},
    }


def test_a_turns_searches_are_those_made_since_the_user_last_spoke() -> None:
    before, first, second = search(A), search(B), search(A_DOCS)
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    said = {"type": "message", "role": "assistant", "content": []}
    context = [before, USER, first, call, said, second]
    assert web_search.turn_searches(iter(context)) == [first, second]
    assert web_search.turn_searches([first, second]) == [first, second]  # no user at all
    assert web_search.turn_searches([*context, USER]) == []
    assert web_search.turn_searches([]) == []


def test_a_turns_sources_are_its_searches_results_in_order() -> None:
    """Searches that kept none (a failed one, a malformed one sent back) give none; a
    source that is not an object is skipped."""
    failed = {"type": "web_search_call", "status": "failed", "action": {"type": "search"}}
    malformed: list[dict[str, Any]] = [
        {"type": "web_search_call", "action": "search"},
        {"type": "web_search_call", "action": {"type": "search", "sources": {"url": A}}},
        {"type": "web_search_call", "action": {"type": "search", "sources": [A, None]}},
    ]
    context = [search(A), USER, search(A_DOCS, B), failed, *malformed, search(B)]
    assert web_search.turn_sources(context) == [source(A_DOCS), source(B), source(B)]
    assert web_search.turn_sources([*context, USER]) == []


@pytest.mark.parametrize(
    ("raw", "scope"),
    [
        ("example.com", ("example.com", "")),
        (" *.Example.COM. ", ("example.com", "")),
        ("https://Docs.Example.com/x/", ("docs.example.com", "/x")),
        ("https://example.com", ("example.com", "")),
        ("http://example.com/a/b?c=1#d", ("example.com", "/a/b")),
        ("example.com/", ("example.com", "")),
        ("example.com/blog/*", ("example.com", "/blog")),
        ("example.com/a/b/", ("example.com", "/a/b")),
        ("example.com/blog?x=/y#z", ("example.com", "/blog")),
        ("example.com/blog#x?y", ("example.com", "/blog")),
        ("example.com/blog?q=a?b", ("example.com", "/blog")),
        ("example.com/blog#a#b", ("example.com", "/blog")),
        ("example.com/docs/X", ("example.com", "/docs/X")),  # paths keep their case
        ("", ("", "")),
        ("*.", ("", "")),
        ("https://", ("", "")),
        ("http://[::1", ("", "")),
    ],
)
def test_a_filter_entry_names_a_host_and_a_path(raw: str, scope: tuple[str, str]) -> None:
    assert web_search.domain_scope(raw) == scope
    assert web_search.domain_name(raw) == scope[0]
