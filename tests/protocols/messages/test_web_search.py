"""The web search server tool on the Messages wire: declared tools and earlier turns in,
``server_tool_use`` and ``web_search_tool_result`` blocks out (checked with the SDK's
types), and nothing shown of a search the client did not declare."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message

from stateway.core import events as ev
from stateway.core.generation_settings import GenerationSettings
from stateway.protocols.messages.decode import decode_messages
from stateway.protocols.messages.encode import encode_message
from stateway.protocols.messages.stream import MessagesStream
from tests.protocols.messages.test_decode import body, refused, sent_back
from tests.protocols.messages.test_encode import TEXT, frames, state

DECLARED = {"type": "web_search", "max_uses": 2}
SOURCES = [
    {"type": "url", "url": "https://a.test/1", "title": "A", "snippet": "About a."},
    {"type": "url", "url": "https://b.test/2", "title": "", "snippet": ""},
]
SEARCH = {
    "id": "ws_abc",
    "type": "web_search_call",
    "status": "completed",
    "action": {"type": "search", "query": "q", "sources": SOURCES},
}
FAILED = {
    "id": "ws_def",
    "type": "web_search_call",
    "status": "failed",
    "action": {"type": "search", "query": "again"},
    "error": "max_uses_exceeded: this response may run at most 1 web search.",
}


def test_the_server_tool_becomes_the_gateway_web_search_with_its_limits() -> None:
    tool = {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 4,
        "allowed_domains": ["docs.test"],
        "user_location": {"type": "approximate", "city": "Oslo"},
        "cache_control": {"type": "ephemeral"},
    }
    command = decode_messages(
        body(tools=[tool], tool_choice={"type": "tool", "name": "web_search"})
    )
    assert command.settings.tools == [
        {
            "type": "web_search",
            "filters": {"allowed_domains": ["docs.test"]},
            "max_uses": 4,
            "user_location": {"type": "approximate", "city": "Oslo"},
        }
    ]
    assert command.settings.tool_choice == {"type": "web_search"}
    later = decode_messages(body(tools=[{"type": "web_search_20260101", "name": "web_search"}]))
    assert later.settings.tools == [{"type": "web_search"}]  # a later version, same tool


def test_a_search_only_code_execution_may_run_is_refused_as_a_tool_of_code_is() -> None:
    """``web_search_20260209``'s ``allowed_callers`` without ``direct`` (searches a program
    runs, there being no code execution here) is refused as a custom tool's is, not offered
    to the model as if it could call it; with ``direct`` the search is offered."""
    tool = {
        "type": "web_search_20260209",
        "name": "web_search",
        "allowed_callers": ["code_execution_20260120"],
    }
    error = refused(body(tools=[tool]))
    assert error.param == "tools.0.allowed_callers"
    direct = {**tool, "allowed_callers": ["direct", "code_execution_20260120"]}
    assert decode_messages(body(tools=[direct])).settings.tools == [{"type": "web_search"}]


@pytest.mark.parametrize("key", ["allowed_domains", "blocked_domains"])
@pytest.mark.parametrize("value", ["", " ", "*.", "https://", "/path"])
def test_a_domain_naming_no_host_is_a_400_naming_it(key: str, value: str) -> None:
    """Read leniently, such a value would be no domain at all: an allow-list of only
    such values would let every domain through."""
    tool = {"type": "web_search_20250305", "name": "web_search", key: ["docs.test", value]}
    error = refused(body(tools=[tool]))
    assert error.param == f"tools.0.{key}.1"
    assert error.message.startswith(f"tools.0.{key}.1: ")


def test_an_earlier_search_comes_back_as_the_call_the_model_saw() -> None:
    shown = encode_message(state(output=[SEARCH, FAILED, TEXT], settings=settings()))
    command = decode_messages(sent_back("look it up", shown["content"]))
    _, search, failed, text, _ = command.input
    assert search == SEARCH | {"action": SEARCH["action"] | {"sources": SOURCES}}
    assert failed == {
        "id": "ws_def",
        "type": "web_search_call",
        "status": "failed",
        "action": {"type": "search", "query": "again"},
        "error": "max_uses_exceeded",
    }
    assert text["content"][0]["text"] == "hi"


def settings(*tools: dict[str, Any]) -> GenerationSettings:
    return GenerationSettings(tools=list(tools or [DECLARED]))


def test_a_declared_search_is_shown_with_its_results_and_counted() -> None:
    wire = encode_message(state(output=[SEARCH, FAILED, TEXT], settings=settings()))
    message = Message.model_validate(wire)
    use, result, refused_use, refused, text = message.content
    assert use.type == "server_tool_use"
    assert use.id == "srvtoolu_abc"
    assert use.input == {"query": "q"}
    assert result.type == "web_search_tool_result"
    assert result.tool_use_id == "srvtoolu_abc"
    assert [(r.url, r.title, r.encrypted_content) for r in result.content] == [  # type: ignore[union-attr]
        ("https://a.test/1", "A", "About a."),
        ("https://b.test/2", "", ""),
    ]
    assert refused_use.type == "server_tool_use"
    assert refused.type == "web_search_tool_result"
    assert wire["content"][3]["content"] == {
        "type": "web_search_tool_result_error",
        "error_code": "max_uses_exceeded",
    }
    assert text.type == "text"
    assert wire["usage"]["server_tool_use"] == {  # the one that ran
        "web_search_requests": 1,
        "web_fetch_requests": 0,
    }


def test_another_failure_is_unavailable() -> None:
    for error in ("searxng answered 503", None):  # a failed call with no error kept, too
        broken = FAILED | {"error": error}
        wire = encode_message(state(output=[broken], settings=settings()))
        assert wire["content"][1]["content"]["error_code"] == "unavailable"
        assert "server_tool_use" not in wire["usage"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("invalid_tool_input: A web search needs a non-empty 'query'.", "invalid_tool_input"),
        ("too_many_requests: SearXNG rate limited the search (HTTP 429)", "too_many_requests"),
        ("max_uses_exceeded", "max_uses_exceeded"),
        ("query_too_long", "query_too_long"),
        ("request_too_large", "request_too_large"),
        ("SearXNG is unavailable (HTTP 503)", "unavailable"),
        ("not_a_code: the search failed", "unavailable"),
        ("", "unavailable"),
    ],
)
def test_a_failure_shows_the_code_of_its_cause(error: str, code: str) -> None:
    wire = encode_message(state(output=[FAILED | {"error": error}], settings=settings()))
    assert wire["content"][1]["content"] == {
        "type": "web_search_tool_result_error",
        "error_code": code,
    }
    Message.model_validate(wire)


@pytest.mark.parametrize(
    "code",
    [
        "invalid_tool_input",
        "unavailable",
        "max_uses_exceeded",
        "too_many_requests",
        "query_too_long",
        "request_too_large",
    ],
)
def test_a_failures_code_survives_being_sent_back(code: str) -> None:
    """A later turn replays the failed search with the code it was shown with, and shows
    it again with the same code."""
    error = f"{code}: why" if code != "unavailable" else "SearXNG is unavailable (HTTP 503)"
    first = encode_message(state(output=[FAILED | {"error": error}], settings=settings()))
    command = decode_messages(sent_back("again", first["content"]))
    failed = command.input[1]
    again = encode_message(state(output=[failed], settings=settings()))
    assert again["content"] == first["content"]
    assert again["content"][1]["content"]["error_code"] == code


def test_a_search_the_client_did_not_declare_is_not_shown() -> None:
    """A backend's ``gateway_tools`` search runs in a hidden round."""
    function = {"type": "function", "name": "f", "parameters": {}}
    hidden = state(output=[SEARCH, TEXT], settings=settings(function))
    wire = encode_message(hidden)
    assert [block["type"] for block in wire["content"]] == ["text"]
    assert "server_tool_use" not in wire["usage"]
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(hidden))
    assert stream.encode(ev.ItemAdded(0, SEARCH)) == b""
    assert stream.encode(ev.ItemDone(0, SEARCH)) == b""
    assert b'"index":0' in stream.encode(ev.ItemAdded(1, TEXT))  # numbering is unaffected


def test_a_streamed_search_numbers_its_two_blocks_before_the_answer() -> None:
    shown = state(output=[SEARCH, TEXT], settings=settings())
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(shown))
    assert stream.encode(ev.ItemAdded(0, SEARCH)) == b""
    sent = [data for _, data in frames(stream.encode(ev.ItemDone(0, SEARCH)))]
    assert [(f["type"], f["index"]) for f in sent] == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_stop", 1),
    ]
    assert sent[1]["delta"] == {"type": "input_json_delta", "partial_json": '{"query":"q"}'}
    assert sent[3]["content_block"]["tool_use_id"] == "srvtoolu_abc"
    assert b'"index":2' in stream.encode(ev.ItemAdded(1, TEXT))
    ending = stream.encode(ev.ResponseFinished(shown))
    assert b'"server_tool_use":{"web_search_requests":1,"web_fetch_requests":0}' in ending


def test_a_mixed_rounds_client_call_streams_after_the_search_made_before_it() -> None:
    """The search's blocks come once it has run; the client's call the model made after
    it waits for them, so the streamed message has the blocks in the order the
    non-streamed one has."""
    running = SEARCH | {"status": "in_progress", "action": {"type": "search", "query": ""}}
    local = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "toolu_1",
        "name": "lookup",
        "arguments": '{"k":1}',
        "status": "completed",
    }
    shown = state(output=[SEARCH, local], settings=settings())
    stream = MessagesStream()
    wire = stream.encode(ev.ResponseCreated(shown))
    wire += stream.encode(ev.ItemAdded(0, running))
    wire += stream.encode(ev.ItemAdded(1, local | {"arguments": "", "status": "in_progress"}))
    wire += stream.encode(ev.ArgumentsDelta(1, "fc_1", '{"k":1}'))
    wire += stream.encode(ev.ItemDone(1, local))
    wire += stream.encode(ev.ItemDone(0, SEARCH))
    wire += stream.encode(ev.ResponseFinished(shown))
    sent = [data for _, data in frames(wire)]
    starts = [f["content_block"]["type"] for f in sent if f["type"] == "content_block_start"]
    expected = [block["type"] for block in encode_message(shown)["content"]]
    assert starts == expected == ["server_tool_use", "web_search_tool_result", "tool_use"]
    blocks = [f["index"] for f in sent if f["type"].startswith("content_block")]
    assert blocks == sorted(blocks)
    assert {"type": "input_json_delta", "partial_json": '{"k":1}'} in [
        f["delta"] for f in sent if f["type"] == "content_block_delta" and f["index"] == 2
    ]


def test_searches_run_together_stream_their_blocks_in_the_order_they_were_made() -> None:
    second = SEARCH | {"id": "ws_two", "action": {"type": "search", "query": "two"}}
    shown = state(output=[SEARCH, second], settings=settings())
    stream = MessagesStream()
    wire = stream.encode(ev.ResponseCreated(shown))
    wire += stream.encode(ev.ItemAdded(0, SEARCH | {"status": "in_progress"}))
    wire += stream.encode(ev.ItemAdded(1, second | {"status": "in_progress"}))
    wire += stream.encode(ev.ItemDone(1, second))  # the second finished first
    wire += stream.encode(ev.ItemDone(0, SEARCH))
    inputs = [f["delta"]["partial_json"] for _, f in frames(wire) if "delta" in f]
    assert inputs == ['{"query":"q"}', '{"query":"two"}']


def test_the_blocks_of_a_search_in_full() -> None:
    bare = {"id": "ws_q", "type": "web_search_call", "status": "completed", "action": {}}
    shown = state(output=[SEARCH, bare], settings=settings())
    content = encode_message(shown)["content"]
    assert content[1]["content"][0] == {
        "type": "web_search_result",
        "url": "https://a.test/1",
        "title": "A",
        "encrypted_content": "About a.",
        "page_age": None,
    }
    assert content[2]["input"] == {"query": ""}  # a search that never got its query
    assert content[3]["content"] == []
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(shown))
    [(_, start), *_] = frames(stream.encode(ev.ItemDone(0, SEARCH)))
    assert start["content_block"] == {
        "type": "server_tool_use",
        "id": "srvtoolu_abc",
        "name": "web_search",
        "input": {},
    }


def test_a_search_sent_back_without_a_query_has_an_empty_one() -> None:
    use = {"type": "server_tool_use", "id": "srvtoolu_z", "name": "web_search", "input": {}}
    odd = use | {"id": "srvtoolu_y", "input": {"query": 5}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_z", "content": []}
    command = decode_messages(
        body(
            messages=[
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [use, result, odd]},
            ]
        )
    )
    queries = [item["action"]["query"] for item in command.input[1:3]]
    assert queries == ["", ""]


def test_a_result_answering_a_call_of_another_tool_is_refused() -> None:
    use = {"type": "server_tool_use", "id": "srvtoolu_z", "name": "tool_search_tool_regex"}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_z", "content": []}
    error = refused(
        body(
            tools=[{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}],
            messages=[
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [use | {"input": {"query": "q"}}, result]},
            ],
        )
    )
    assert (error.param, error.code) == ("messages.1.content.1.tool_use_id", "tool_call_not_found")
    assert error.message == (
        "messages.1.content.1.tool_use_id: unexpected tool_use_id 'srvtoolu_z' found in a "
        "web_search_tool_result block: it must follow the block of the call it answers."
    )


HOSTED_SEALED = "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2IaDCQ" * 8 + "=="
"""The ``encrypted_content`` of a hit Anthropic's own search found: opaque to any model
but Anthropic's, which unseals it."""


def test_a_hit_of_anthropics_own_search_reaches_the_model_without_its_sealed_text() -> None:
    """A conversation begun on Anthropic's API and continued here sends back its searches:
    their hits' ``encrypted_content`` is no snippet (the model would read kilobytes of
    base64); the hit keeps its title and URL. The gateway's own snippets stay."""
    use = {"type": "server_tool_use", "id": "srvtoolu_h", "name": "web_search", "input": {}}
    hits = [
        {
            "type": "web_search_result",
            "url": "https://a.test/",
            "title": "A",
            "encrypted_content": HOSTED_SEALED,
        },
        {
            "type": "web_search_result",
            "url": "https://b.test/",
            "title": "B",
            "encrypted_content": "About b.",
        },
    ]
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_h", "content": hits}
    command = decode_messages(
        body(
            messages=[
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [use, result]},
            ]
        )
    )
    sources = command.input[1]["action"]["sources"]
    assert [(s["url"], s["title"], s["snippet"]) for s in sources] == [
        ("https://a.test/", "A", ""),
        ("https://b.test/", "B", "About b."),
    ]


def _cited(text: str, *urls: str) -> dict[str, Any]:
    """An answer naming ``urls``, with the ``url_citation`` annotations the assembler gives."""
    annotations = [
        {
            "type": "url_citation",
            "start_index": text.index(url),
            "end_index": text.index(url) + len(url),
            "url": url,
            "title": url,
        }
        for url in urls
    ]
    part = {"type": "output_text", "text": text, "annotations": annotations}
    return {**TEXT, "id": "msg_c", "content": [part]}


ANSWER = _cited("See https://a.test/1 and https://elsewhere.test", "https://a.test/1")
ANSWER["content"][0]["annotations"].append(
    {"type": "url_citation", "start_index": 25, "end_index": 47, "url": "https://elsewhere.test"}
)
"""Cites a hit of the search, and a URL no search shown found (left uncited)."""
LOCATION = {
    "type": "web_search_result_location",
    "url": "https://a.test/1",
    "title": "A",
    "cited_text": "About a.",
}


def test_an_answer_naming_a_hit_cites_it_as_a_web_search_result_location() -> None:
    wire = encode_message(state(output=[SEARCH, ANSWER], settings=settings()))
    message = Message.model_validate(wire)
    text = message.content[2]
    assert text.type == "text"
    assert text.text == ANSWER["content"][0]["text"]
    [citation] = text.citations or ()
    assert citation.type == "web_search_result_location"
    assert citation.model_dump(exclude={"encrypted_index"}) == LOCATION
    assert citation.encrypted_index  # opaque, but there: the SDK requires it


def test_a_streamed_answer_gets_its_citations_as_deltas_after_its_text() -> None:
    shown = state(output=[SEARCH, ANSWER], settings=settings())
    part = ANSWER["content"][0]
    stream = MessagesStream()
    log = [
        ev.ResponseCreated(shown),
        ev.ItemAdded(0, SEARCH),
        ev.ItemDone(0, SEARCH),
        ev.ItemAdded(1, {**ANSWER, "content": []}),
        ev.TextDelta(1, 0, "msg_c", part["text"]),
        ev.PartDone(1, 0, "msg_c", part),
        ev.ItemDone(1, ANSWER),
    ]
    sent = frames(b"".join(stream.encode(event) for event in log))
    deltas = [d["delta"] for name, d in sent if name == "content_block_delta" and d["index"] == 2]
    assert [d["type"] for d in deltas] == ["text_delta", "citations_delta"]
    streamed = deltas[1]["citation"]
    assert {k: v for k, v in streamed.items() if k != "encrypted_index"} == LOCATION
    blocks = encode_message(shown)["content"]
    assert streamed == blocks[2]["citations"][0]  # the same as the message's


def test_the_hits_of_a_search_the_client_did_not_declare_are_not_cited() -> None:
    function = {"type": "function", "name": "f", "parameters": {}}
    hidden = state(output=[SEARCH, ANSWER], settings=settings(function))
    assert "citations" not in encode_message(hidden)["content"][0]
    stream = MessagesStream()
    stream.encode(ev.ResponseCreated(hidden))
    stream.encode(ev.ItemDone(0, SEARCH))
    stream.encode(ev.ItemAdded(1, {**ANSWER, "content": []}))
    assert stream.encode(ev.PartDone(1, 0, "msg_c", ANSWER["content"][0])) == b""


def test_a_cited_answer_sent_back_is_taken_and_its_text_reaches_the_model() -> None:
    shown = encode_message(state(output=[SEARCH, ANSWER], settings=settings()))
    command = decode_messages(sent_back("more", shown["content"]))
    texts = [item for item in command.input if item.get("role") == "assistant"]
    assert texts[0]["content"][0]["text"] == ANSWER["content"][0]["text"]
