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
        assert covered == annotation["url"]
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


def test_citations_may_touch() -> None:
    assert cited(A + B, [source(A), source(B)]) == [(A, A), (B, B)]


@pytest.mark.parametrize(
    "text",
    [
        f"See {A}/pricing for the plans.",  # a source's URL begins a longer one
        f"See {A_DOCS}2 and {A_DOCS}.html.",
        f"See {A_DOCS}?page=2 or {A_DOCS}#install",
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
