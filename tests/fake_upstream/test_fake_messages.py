"""The fake upstream's Anthropic Messages wire, driven with the official ``anthropic`` SDK,
and what it refuses as Anthropic would."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from tests.fake_upstream.conftest import RawHttp

from stateway.core.compaction.prompt import SUMMARY_PROMPT
from stateway.fake_upstream.messages import REFUSAL_DETAILS, signature_of
from stateway.fake_upstream.plan import SUMMARY_HEADING

TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


@pytest.fixture
def claude(fake_upstream_url: str) -> Iterator[Anthropic]:
    with Anthropic(
        base_url=fake_upstream_url.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=10
    ) as sdk:
        yield sdk


def ask(claude: Anthropic, text: str, **kwargs: Any) -> Any:
    messages = kwargs.pop("messages", [{"role": "user", "content": text}])
    return claude.messages.create(
        model="fake-model", max_tokens=kwargs.pop("max_tokens", 4000), messages=messages, **kwargs
    )


def test_a_plain_message(claude: Anthropic) -> None:
    message = ask(claude, "ping pong", system="be nice")
    assert message.type == "message"
    assert message.model == "fake-model"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello! You said: ping pong"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 4


def test_a_stream_matches_the_message(claude: Anthropic) -> None:
    with claude.messages.stream(
        model="fake-model",
        max_tokens=4000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=TOOLS,
        messages=[
            {
                "role": "user",
                "content": '[[reason:let me see]] [[tool:get_weather:{"city":"Oslo"}]]',
            }
        ],
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert "ping" not in kinds  # the SDK drops pings
    assert kinds[-1] == "message_stop"
    thinking, call = final.content
    assert thinking.type == "thinking"
    assert thinking.signature == signature_of("let me see")
    assert call.type == "tool_use"
    assert call.input == {"city": "Oslo"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens_details is not None


def test_thinking_disabled_is_taken_and_no_thinking_comes_back(claude: Anthropic) -> None:
    """As Anthropic answers ``thinking: disabled`` (with tools or sampling settings that
    thinking refuses): no thinking block, streamed or not."""
    asked: Any = {
        "model": "fake-model",
        "max_tokens": 4000,
        "thinking": {"type": "disabled"},
        "extra_body": {"temperature": 0.2},  # SDK 2.14 has no argument for it
        "tools": TOOLS,
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": '[[reason:hmm]] [[tool:get_weather:{"a":1}]]'}],
    }
    message = claude.messages.create(**asked)
    with claude.messages.stream(**asked) as stream:
        streamed = stream.get_final_message()
    for answer in (message, streamed):
        assert [block.type for block in answer.content] == ["tool_use"]
        assert answer.usage.output_tokens_details is None


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_without_its_text_carries_it_in_the_signature(
    claude: Anthropic, stream: bool
) -> None:
    """``display: "omitted"``: an empty thinking block (no ``thinking_delta``) whose
    signature carries the text; sent back, the model sees its reasoning (``[[echo]]``)."""
    thinking: Any = {"type": "adaptive", "display": "omitted"}
    prompt = '[[reason:let me see]] [[echo]] [[tool:get_weather:{"city":"Oslo"}]]'
    if stream:
        with claude.messages.stream(
            model="fake-model",
            max_tokens=4000,
            thinking=thinking,
            tools=TOOLS,
            messages=[user(prompt)],
        ) as events:
            kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
            first = events.get_final_message()
        assert "thinking_delta" not in kinds
        assert "signature_delta" in kinds
    else:
        first = ask(claude, prompt, thinking=thinking, tools=TOOLS)
    block, call = first.content
    assert block.type == "thinking"
    assert (block.thinking, block.signature) == ("", signature_of("let me see", omitted=True))
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}
    assistant = {"role": "assistant", "content": [b.model_dump() for b in first.content]}
    second = ask(claude, "", messages=[user(prompt), assistant, user([result])], tools=TOOLS)
    assert "reasoning: let me see" in second.content[-1].text.splitlines()


CITED_DOCUMENTS: Any = [
    {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "The grass is green."},
        "title": "Grass",
        "citations": {"enabled": True},
    },
    {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "Sky: blue."}]},
        "citations": {"enabled": True},
    },
]


@pytest.mark.parametrize("stream", [False, True])
def test_documents_with_citations_enabled_are_cited(claude: Anthropic, stream: bool) -> None:
    """After the answer, a text block quoting each document, citing it as Anthropic does
    (streamed: a ``citations_delta`` before the text)."""
    messages: Any = [user([*CITED_DOCUMENTS, {"type": "text", "text": "colors?"}])]
    if stream:
        with claude.messages.stream(model="m", max_tokens=50, messages=messages) as events:
            kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
            message = events.get_final_message()
        assert kinds[-4:] == ["citations_delta", "text_delta", "citations_delta", "text_delta"]
    else:
        message = ask(claude, "", messages=messages)
    answer, grass, sky = message.content
    assert answer.type == grass.type == sky.type == "text"
    assert answer.citations is None
    assert grass.text == "The grass is green."
    assert [c.model_dump() for c in grass.citations or ()] == [
        {
            "type": "char_location",
            "cited_text": "The grass is green.",
            "document_index": 0,
            "document_title": "Grass",
            "start_char_index": 0,
            "end_char_index": 19,
            "file_id": None,
        }
    ]
    [block] = sky.citations or ()
    assert block.type == "content_block_location"
    assert (block.document_index, block.start_block_index, block.end_block_index) == (1, 0, 1)


def test_every_stream_frame_names_its_event(fake_upstream_url: str) -> None:

    request = urllib.request.Request(
        fake_upstream_url + "/messages",
        data=json.dumps(
            {
                "model": "m",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": "a b"}],
            }
        ).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    frames = raw.split(b"\n\n")[:-1]
    for frame in frames:
        event, data = frame.split(b"\n")
        assert (
            json.loads(data.removeprefix(b"data: "))["type"]
            == event.removeprefix(b"event: ").decode()
        )
    assert frames[1] == b'event: ping\ndata: {"type":"ping"}'


def test_a_tool_round_trip_with_thinking_sent_back(claude: Anthropic) -> None:
    prompt = '[[reason:hmm]] [[tool:get_weather:{"city":"Oslo"}]]'
    first = ask(claude, prompt, tools=TOOLS, thinking={"type": "enabled", "budget_tokens": 1024})
    use = first.content[-1]
    messages = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    second = ask(
        claude,
        "",
        messages=messages,
        tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert second.content[-1].text == "Tool said: sunny"


def test_the_compaction_prompt_beside_tool_results_asks_for_a_summary(claude: Anthropic) -> None:
    """A compaction mid-turn puts the prompt in the message of the tool's result (Anthropic
    allows no user message between): the fake summarizes instead of calling the tool again."""
    prompt = '[[tool:get_weather:{"city":"Oslo"}]]'
    use = ask(claude, prompt, tools=TOOLS).content[-1]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}
    messages = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
        {"role": "user", "content": [result, {"type": "text", "text": SUMMARY_PROMPT}]},
    ]
    summary = ask(claude, "", messages=messages, tools=TOOLS)
    assert summary.content[-1].text.startswith(SUMMARY_HEADING)


def test_a_stop_sequence_ends_the_text(claude: Anthropic) -> None:
    message = ask(claude, "alpha beta gamma", stop_sequences=["gamma", "beta"])
    assert message.content[0].text == "Hello! You said: alpha "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "beta")


def test_max_tokens_cuts_the_answer(claude: Anthropic) -> None:
    message = ask(claude, "one two three four", max_tokens=2)
    assert message.stop_reason == "max_tokens"


@pytest.mark.parametrize("reason", ["pause_turn", "model_context_window_exceeded"])
def test_a_scripted_stop_reason_ends_the_answer(claude: Anthropic, reason: Any) -> None:
    message = ask(claude, f"go [[stop:{reason}]]")
    assert (message.stop_reason, message.content[0].text) == (reason, "Hello! You said: go")
    with claude.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": f"[[stop:{reason}]]"}]
    ) as stream:
        assert stream.get_final_message().stop_reason == reason


def test_a_refusal_has_its_stop_details(claude: Anthropic) -> None:
    message = ask(claude, "[[refuse:No.]]")
    assert message.stop_reason == "refusal"
    assert message.stop_details is not None
    assert message.stop_details.model_dump() == REFUSAL_DETAILS
    with claude.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "[[refuse:No.]]"}]
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_details == message.stop_details


@pytest.mark.parametrize(
    ("status", "kind", "sdk_error"),
    [
        (400, "invalid_request_error", anthropic.BadRequestError),
        (404, "not_found_error", anthropic.NotFoundError),
        (429, "rate_limit_error", anthropic.RateLimitError),
        (500, "api_error", anthropic.InternalServerError),
        (529, "overloaded_error", anthropic.APIStatusError),
    ],
)
def test_scripted_errors_have_anthropics_shape(
    claude: Anthropic, status: int, kind: str, sdk_error: type[Exception]
) -> None:
    with pytest.raises(sdk_error) as caught:
        ask(claude, f"[[error:{status}]]")
    assert isinstance(caught.value, anthropic.APIStatusError)
    assert caught.value.status_code == status
    assert caught.value.body == {
        "type": "error",
        "error": {"type": kind, "message": f"Scripted failure: [[error:{status}]]"},
    }


def test_a_mid_stream_error_is_an_error_event(claude: Anthropic) -> None:
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        claude.messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "[[leak:stream]] hi"}]
        ) as stream,
    ):
        stream.get_final_message()
    assert caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


THOUGHT = {"type": "thinking", "thinking": "x", "signature": signature_of("x")}
USE = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}
HIT = {
    "type": "search_result",
    "source": "s",
    "title": "t",
    "content": [{"type": "text", "text": "x"}],
}
JPG = {"type": "base64", "media_type": "image/jpg", "data": "/9j/4AAQ"}
FIVE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
HIT_CITED = {"type": "search_result_location", "search_result_index": 0, "cited_text": "x"}


def cited(*citations: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "a", "citations": list(citations)}],
    }


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"unknown_field": 1}, "unknown_field"),
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [user([{"type": "text", "text": ""}])]}, "non-empty"),
        ({"messages": [user([{"type": "video"}])]}, "video"),
        (
            {"messages": [user([{"type": "image", "source": JPG}])]},
            "messages.0.content.0.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'",
        ),
        ({"system": [{"type": "text", "text": ""}]}, "system"),
        ({"messages": [user([{"type": "text", "text": " \n"}])]}, "non-whitespace"),
        ({"messages": [user(" ")]}, "non-whitespace"),
        ({"messages": [user("q"), {"role": "assistant", "content": "\t"}]}, "non-whitespace"),
        ({"system": [{"type": "text", "text": "  "}]}, "non-whitespace"),
        ({"stop_sequences": ["END", ""]}, "stop_sequences: each stop sequence must be non-empty"),
        ({"stop_sequences": ["\n"]}, "stop_sequences: each stop sequence must contain non-white"),
        (
            {
                "messages": [
                    user("q"),
                    {"role": "assistant", "content": [USE]},
                    user([{**RESULT, "content": [{"type": "text", "text": " "}]}]),
                ]
            },
            "non-whitespace",
        ),
        ({"tools": [{"name": "a.b", "input_schema": {}}]}, "a.b"),
        ({"messages": [user("q"), {"role": "assistant", "content": [USE]}]}, "toolu_1"),
        (
            {"messages": [user("q"), {"role": "assistant", "content": [USE]}, user("no result")]},
            "toolu_1",
        ),
        ({"messages": [user([RESULT])]}, "toolu_1"),
        (
            {"messages": [user("q"), {"role": "assistant", "content": [USE]}, user([RESULT])]},
            "Requests which include `tool_use` or `tool_result` blocks must define tools.",
        ),
        (
            {
                "messages": [
                    user("q"),
                    {"role": "assistant", "content": [USE]},
                    user([{"type": "text", "text": "a"}, RESULT]),
                ]
            },
            "first",
        ),
        (
            {"messages": [user("q"), {"role": "assistant", "content": [{**USE, "id": "bad:id"}]}]},
            "pattern",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "1024"),
        ({"thinking": {"type": "enabled", "budget_tokens": 9000}}, "greater"),
        ({"thinking": {"type": "adaptive"}, "temperature": 0.5}, "temperature"),
        ({"thinking": {"type": "adaptive"}, "top_k": 5}, "top_k"),
        ({"thinking": {"type": "adaptive"}, "top_p": 0.5}, "top_p"),
        (
            {
                "thinking": {"type": "adaptive"},
                "tool_choice": {"type": "any"},
                "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            },
            "forces",
        ),
        (
            {
                "messages": [
                    user("q"),
                    {"role": "assistant", "content": [{**THOUGHT, "signature": "forged"}]},
                ]
            },
            "signature",
        ),
        (
            {
                "messages": [
                    user("q"),
                    {
                        "role": "assistant",
                        "content": [
                            {**THOUGHT, "thinking": "", "signature": "eA==." + signature_of("y")}
                        ],
                    },
                ]
            },
            "signature",
        ),
        ({"messages": [user([{**HIT, "source": ""}])]}, "source"),
        ({"messages": [user([{**HIT, "content": []}])]}, "content"),
        ({"messages": [user([HIT]), cited({**HIT_CITED, "search_result_index": 1})]}, "range"),
        ({"messages": [user("q"), cited({"type": "char_location", "document_index": 0})]}, "range"),
        ({"messages": [user([HIT]), cited({"type": "web_search_result_location"})]}, "encrypted"),
        ({"messages": [user([HIT]), cited({"type": "video_location"})]}, "video_location"),
        ({"thinking": {"type": "adaptive", "display": "hidden"}}, "display"),
        ({"thinking": {"type": "disabled", "budget_tokens": 1024}}, "thinking.disabled"),
        ({"output_config": {"verbosity": "low"}}, "output_config"),
        ({"output_config": {"effort": "minimal"}}, "output_config.effort"),
        ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format"),
        (
            {"output_config": {"format": {"type": "json_schema", "name": "x", "schema": {}}}},
            "output_config.format",
        ),
        (
            {
                "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": FIVE}],
                "messages": [user([{"type": "text", "text": "q", "cache_control": HOUR}])],
            },
            "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not "
            "come after a ttl='5m' cache_control block",
        ),
        ({"messages": [user([{"type": "text", "text": "q", "cache_control": {}}])]}, "type"),
        (
            {"cache_control": {"type": "ephemeral", "ttl": "30m"}},
            "cache_control.ttl: Input should be '5m' or '1h'",
        ),
    ],
)
def test_what_anthropic_refuses_is_refused(
    raw_http: RawHttp, fake_upstream_url: str, fields: dict[str, Any], words: str
) -> None:
    body = {"model": "m", "max_tokens": 8000, "messages": [user("q")], **fields}
    body = {k: v for k, v in body.items() if v is not None}
    status, _, reply = raw_http("POST", fake_upstream_url + "/messages", json.dumps(body).encode())
    assert status == 400, reply
    assert reply["type"] == "error"
    assert reply["error"]["type"] == "invalid_request_error"
    assert words in reply["error"]["message"]


def test_what_anthropic_takes_is_taken(raw_http: RawHttp, fake_upstream_url: str) -> None:
    messages = [
        user("q"),
        {"role": "system", "content": "# Environment"},
        {
            "role": "assistant",
            "content": [THOUGHT, {"type": "redacted_thinking", "data": "d"}, USE],
        },
        user([RESULT, {"type": "text", "text": "reminder"}]),
    ]
    body = {
        "model": "m",
        "max_tokens": 8000,
        "messages": messages,
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    status, _, reply = raw_http("POST", fake_upstream_url + "/messages", json.dumps(body).encode())
    assert status == 200, reply
    assert reply["content"][-1]["text"] == "Tool said: r"


def test_an_hours_marks_before_shorter_ones_are_taken(claude: Anthropic) -> None:
    """Anthropic's order of lifetimes: an hour's marks first, then default ones."""
    marked = [
        {"type": "text", "text": "a", "cache_control": HOUR},
        {"type": "text", "text": "b", "cache_control": {**FIVE, "ttl": "5m"}},
        {"type": "text", "text": "c", "cache_control": FIVE},
    ]
    answer = ask(claude, "ignored", messages=[user(marked)], cache_control=HOUR)
    assert answer.content[0].text


def test_automatic_prompt_caching_is_taken(claude: Anthropic) -> None:
    """A top-level ``cache_control`` (the SDK's ``cache_control``: Anthropic's automatic
    caching), on a message and on a count."""
    auto: Any = {"type": "ephemeral"}
    assert ask(claude, "hi", cache_control=auto).content[0].text == "Hello! You said: hi"
    counted = claude.messages.count_tokens(model="m", messages=[user("hi")], cache_control=auto)
    assert counted.input_tokens == 1


def test_an_interleaved_thinking_budget_may_pass_max_tokens(claude: Anthropic) -> None:
    """With the ``interleaved-thinking-2025-05-14`` beta the budget is the whole turn's, so
    Anthropic takes one at or past ``max_tokens``; without it, that is refused."""
    thinking: Any = {"type": "enabled", "budget_tokens": 4000}
    betas = ["interleaved-thinking-2025-05-14"]
    message = claude.beta.messages.create(
        model="m", max_tokens=2000, thinking=thinking, betas=betas, messages=[user("hi")]
    )
    assert message.content[-1].text == "Hello! You said: hi"  # type: ignore[union-attr]
    with pytest.raises(anthropic.BadRequestError, match="must be greater than"):
        ask(claude, "hi", max_tokens=2000, thinking=thinking)


def test_search_results_and_their_citations_are_taken(claude: Anthropic) -> None:
    """A ``search_result`` in a user message or a tool result, read as its text; a text
    block citing one of them."""
    history: Any = [
        user([HIT, {"type": "text", "text": "q"}]),
        cited(HIT_CITED, {**HIT_CITED, "search_result_index": 1}),
        user("[[tool:f:{}]]"),
        {"role": "assistant", "content": [USE]},
        user([{**RESULT, "content": [HIT]}]),
    ]
    tools: Any = [{"name": "f", "input_schema": {"type": "object"}}]
    message = claude.messages.create(
        model="fake-model", max_tokens=100, messages=history, tools=tools
    )
    assert message.content[0].text == "Tool said: x"
    echoed = claude.messages.create(
        model="fake-model",
        max_tokens=100,
        messages=[user([HIT, {"type": "text", "text": "[[echo]]"}])],
    )
    assert echoed.content[0].text == "user: x[[echo]]"


def test_count_tokens(claude: Anthropic) -> None:
    counted = claude.messages.count_tokens(model="m", system="one two", messages=[user("three")])
    assert counted.input_tokens == 3


def test_models_in_anthropics_shape(claude: Anthropic) -> None:
    page = claude.models.list()
    assert [m.id for m in page.data] == ["fake-model"]
    assert page.data[0].type == "model"


def test_the_key_may_come_as_x_api_key(
    raw_http: RawHttp, fake_upstream_keyed_url: str, fake_upstream_api_key: str
) -> None:
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": [user("hi")]}).encode()
    url = fake_upstream_keyed_url + "/messages"
    status, _, _ = raw_http("POST", url, body, {"x-api-key": fake_upstream_api_key})
    assert status == 200
    status, _, reply = raw_http("POST", url, body, {"x-api-key": "wrong"})
    assert status == 401
    assert reply["error"]["type"] == "authentication_error"
    root = fake_upstream_keyed_url.removesuffix("/v1")
    with Anthropic(base_url=root, api_key=fake_upstream_api_key, max_retries=0) as bearer:
        assert bearer.messages.create(model="m", max_tokens=10, messages=[user("hi")]).content


def test_the_log_keeps_the_anthropic_headers(
    claude: Anthropic, raw_http: RawHttp, fake_upstream_url: str
) -> None:
    root = fake_upstream_url.removesuffix("/v1")
    raw_http("DELETE", root + "/_fake/requests")
    claude.messages.create(
        model="m", max_tokens=10, messages=[user("hi")], extra_headers={"anthropic-beta": "x-1"}
    )
    _, _, log = raw_http("GET", root + "/_fake/requests")
    [entry] = log["data"]
    assert entry["path"] == "/v1/messages"
    assert entry["headers"]["authorization"] == "Bearer unused"  # how SDK 2.14 sends it
    assert entry["headers"]["anthropic-beta"] == "x-1"
    assert "anthropic-version" in entry["headers"]


def test_cached_reports_part_of_the_prompt_read_from_the_cache(claude: Anthropic) -> None:
    """As Anthropic counts it: ``input_tokens`` the prompt outside the cache, the reads
    beside it, in the stream's ``message_start`` too."""
    message = ask(claude, "one two three four [[cached:3]]")
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (2, 3)
    with claude.messages.stream(
        model="fake-model",
        max_tokens=100,
        messages=[{"role": "user", "content": "one two three four [[cached:3]]"}],
    ) as stream:
        started = [e for e in stream if e.type == "message_start"]
        final = stream.get_final_message()
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens) == (2, 3)
    [start] = started
    assert (start.message.usage.input_tokens, start.message.usage.cache_read_input_tokens) == (
        2,
        3,
    )
