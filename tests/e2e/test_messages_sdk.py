"""The Messages frontend end to end: the real ``stateway serve`` in front of the real fake
upstream speaking each upstream shape (chat, responses, anthropic), driven by the official
``anthropic`` SDK; and the Responses frontend over the Anthropic backend (``openai`` SDK)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pydantic
import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway

MODEL = "fake-model"
UPSTREAM_KEY = "sk-upstream-e2e"
TOOLS: list[Any] = [
    {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}
]
TOOL_PROMPT = '[[tool:get_weather:{"city":"Oslo"}]] weather?'


@pytest.fixture(scope="module")
def keyed_upstream() -> Iterator[str]:
    """Its chat template takes a system message only first, as many open models' do."""
    with start_fake_upstream(api_key=UPSTREAM_KEY, system_first=True) as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def upstream_api(request: pytest.FixtureRequest) -> str:
    api: str = request.param
    return api


@pytest.fixture(scope="module")
def messages_gateway(
    keyed_upstream: str, upstream_api: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", keyed_upstream, "--upstream-api", upstream_api, "--database", database]
    args += ["--upstream-api-key-env", "E2E_UPSTREAM_KEY"]
    with start_gateway(args, env={"E2E_UPSTREAM_KEY": UPSTREAM_KEY}) as url:
        yield url


@pytest.fixture
def claude(messages_gateway: str) -> Iterator[Anthropic]:
    with Anthropic(base_url=messages_gateway, api_key="client-key", max_retries=0) as sdk:
        yield sdk


def upstream_log(upstream: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        data: list[dict[str, Any]] = orjson.loads(reply.read())["data"]
    return data


def clear(upstream: str) -> None:
    request = urllib.request.Request(
        upstream.removesuffix("/v1") + "/_fake/requests", method="DELETE"
    )
    urllib.request.urlopen(request).close()


def create(claude: Anthropic, messages: list[Any], **kwargs: Any) -> anthropic.types.Message:
    return claude.messages.create(
        model=MODEL, max_tokens=kwargs.pop("max_tokens", 4000), messages=messages, **kwargs
    )


def streamed(claude: Anthropic, messages: list[Any], **kwargs: Any) -> anthropic.types.Message:
    with claude.messages.stream(
        model=MODEL, max_tokens=kwargs.pop("max_tokens", 4000), messages=messages, **kwargs
    ) as stream:
        return stream.get_final_message()


SEND = [create, streamed]


@pytest.mark.parametrize("send", SEND)
def test_a_plain_message(claude: Anthropic, send: Any) -> None:
    message = send(claude, [{"role": "user", "content": "hi there"}], system="be brief")
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello! You said: hi there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0


@pytest.mark.parametrize("send", SEND)
def test_a_client_tool_round_trip(claude: Anthropic, send: Any) -> None:
    first = send(claude, [{"role": "user", "content": TOOL_PROMPT}], tools=TOOLS)
    assert first.stop_reason == "tool_use"
    [use] = [block for block in first.content if block.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Oslo"})
    history = [
        {"role": "user", "content": TOOL_PROMPT},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    second = send(claude, history, tools=TOOLS)
    assert second.stop_reason == "end_turn"
    assert second.content[-1].text == "Tool said: sunny"


def test_results_split_over_user_messages_answer_their_calls(claude: Anthropic) -> None:
    """Anthropic merges consecutive user messages into one turn: each result may come in a
    message of its own."""
    calls = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "get_weather", "input": {"city": city}}
        for n, city in enumerate(("Oslo", "Rome"))
    ]
    results = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], **out}]}
        for call, out in zip(calls, ({"content": "sunny"}, {"content": "rain"}), strict=True)
    ]
    history = [{"role": "user", "content": TOOL_PROMPT}, {"role": "assistant", "content": calls}]
    answer = create(claude, [*history, *results], tools=TOOLS)
    assert answer.stop_reason == "end_turn"
    assert answer.content[-1].type == "text"
    assert answer.content[-1].text.startswith("Tool said: ")


@pytest.mark.parametrize("send", SEND)
def test_thinking_round_trip(claude: Anthropic, send: Any) -> None:
    prompt = f"[[reason:let me think]] {TOOL_PROMPT}"
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = send(claude, [{"role": "user", "content": prompt}], tools=TOOLS, thinking=thinking)
    block = first.content[0]
    assert block.type == "thinking"
    assert block.thinking == "let me think"
    # the gateway signs: the thinking, or the upstream's signature, sealed with its key
    assert block.signature.startswith("sw1.")
    use = first.content[-1]
    history = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "rain"}],
        },
    ]
    # The fake refuses a thinking block whose signature it did not make.
    second = send(claude, history, tools=TOOLS, thinking=thinking)
    assert second.content[-1].text == "Tool said: rain"


@pytest.mark.parametrize("send", SEND)
@pytest.mark.parametrize(
    "thinking", [{"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}]
)
def test_thinking_an_upstream_hides_is_shown_as_its_summary(
    claude: Anthropic, keyed_upstream: str, upstream_api: str, send: Any, thinking: Any
) -> None:
    """A Responses upstream's reasoning model hides its reasoning (``[[hidden]]``: as
    OpenAI's do) and gives only a summary, when asked for one: thinking that is shown is
    asked for it (``summary: auto``), so the thinking block has text on every upstream;
    ``display: "omitted"`` asks for none (the block has no text to show)."""
    clear(keyed_upstream)
    prompt = "[[reason:let me think]] [[hidden]] hi"
    message = send(claude, [{"role": "user", "content": prompt}], thinking=thinking)
    block = message.content[0]
    assert block.type == "thinking"
    assert block.thinking == "let me think"
    omitted = {**thinking, "display": "omitted"}
    send(claude, [{"role": "user", "content": prompt}], thinking=omitted)
    shown, hidden = (entry["body"] for entry in upstream_log(keyed_upstream))
    if upstream_api == "responses":
        assert shown["reasoning"]["summary"] == "auto"
        assert "summary" not in hidden["reasoning"]


@pytest.mark.parametrize("send", SEND)
def test_thinking_without_its_text_round_trip(claude: Anthropic, send: Any) -> None:
    """``display: "omitted"`` (what Claude Code asks for): the thinking block comes without
    its text, which its signature carries (Anthropic's, or the gateway's seal); sent back,
    it gives the model its reasoning again (``[[echo]]``: the model's view)."""
    prompt = f"[[reason:let me think]] [[echo]] {TOOL_PROMPT}"
    thinking = {"type": "adaptive", "display": "omitted"}
    first = send(claude, [{"role": "user", "content": prompt}], tools=TOOLS, thinking=thinking)
    block = first.content[0]
    assert block.type == "thinking"
    assert block.thinking == ""
    assert block.signature.startswith("sw1.")  # the upstream's, if it signed, sealed over
    use = first.content[-1]
    assistant = [b.model_dump(exclude_none=True) for b in first.content]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "rain"}
    history = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": [result]},
    ]
    second = send(claude, history, tools=TOOLS, thinking=thinking)
    seen = second.content[-1].text.splitlines()
    assert seen[seen.index(f"user: {prompt}") + 1] == "reasoning: let me think"

    altered = [{**assistant[0], "signature": block.signature[:-4] + "AAAA"}, *assistant[1:]]
    history[1] = {"role": "assistant", "content": altered}
    with pytest.raises(anthropic.BadRequestError) as refused:
        send(claude, history, tools=TOOLS, thinking=thinking)
    assert refused.value.status_code == 400
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert "Invalid `signature` in `thinking` block" in error["message"]
    assert error["message"].startswith("messages.1.content.0: ")  # the block, as Anthropic


def test_count_tokens(claude: Anthropic) -> None:
    counted = claude.messages.count_tokens(
        model=MODEL, system="one two", messages=[{"role": "user", "content": "three four five"}]
    )
    # the fake counts words, through /v1/messages/count_tokens or /tokenize alike
    assert counted.input_tokens == 5


@pytest.mark.parametrize("send", SEND)
def test_max_tokens_0_is_a_prewarm(claude: Anthropic, keyed_upstream: str, send: Any) -> None:
    """Anthropic's "populate the prompt cache without generating a response": a message
    with no content, stopped at its limit, and no model asked."""
    clear(keyed_upstream)
    message = send(claude, [{"role": "user", "content": "warm up"}], system="s", max_tokens=0)
    assert (message.content, message.stop_reason, message.stop_sequence) == ([], "max_tokens", None)
    assert message.usage.output_tokens == 0
    assert upstream_log(keyed_upstream) == []
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(claude, [{"role": "user", "content": "x"}], max_tokens=-1)
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert caught.value.body["error"]["message"].startswith("max_tokens: ")  # type: ignore[index]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("fallbacks", [{"model": "claude-other"}]),
    ],
)
def test_hosted_features_the_gateway_cannot_honour_are_refused(
    claude: Anthropic, field: str, value: Any
) -> None:
    """Ignored, each would answer another request than the one asked: a 400 naming it."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.beta.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            **{field: value},
        )
    error = caught.value.body["error"]  # type: ignore[index]
    assert (error["type"], error["message"].split(":")[0]) == ("invalid_request_error", field)


def test_web_search_without_a_search_provider_is_refused_in_messages_words(
    claude: Anthropic,
) -> None:
    """This gateway has no search provider: Anthropic's web search server tool (which
    Claude Code's WebSearch declares) is a 400 saying what to configure, in a create and
    in a count alike, without the optional declaration only the Responses API has."""
    tools: Any = [*TOOLS, {"type": "web_search_20250305", "name": "web_search"}]
    asked: Any = {"model": MODEL, "messages": [{"role": "user", "content": "news?"}]}
    for send in (
        lambda: claude.messages.create(max_tokens=100, tools=tools, **asked),
        lambda: claude.messages.count_tokens(tools=tools, **asked),
    ):
        with pytest.raises(anthropic.BadRequestError) as caught:
            send()
        error = caught.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("tools: the web_search server tool needs a web ")
        assert "STATEWAY_WEB_SEARCH_PROVIDER" in error["message"]
        assert "external_web_access" not in error["message"]


def test_hosted_features_that_change_no_answer_are_ignored(claude: Anthropic) -> None:
    message = claude.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "hi there"}],
        speed="fast",
        inference_geo="us",
        diagnostics={"previous_message_id": None},
        fallbacks="default",
        thinking={"type": "between_tools"},
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello! You said: hi there"


def test_models_list(claude: Anthropic) -> None:
    page = claude.models.list()
    assert MODEL in [model.id for model in page.data]
    assert page.has_more is False
    assert page.data[0].type == "model"


def test_model_answers_carry_their_request_id(claude: Anthropic) -> None:
    """As every Anthropic answer does: the SDK gives it as ``_request_id``."""
    listed = claude.models.with_raw_response.list()
    assert str(listed.request_id).startswith("req_")
    model = claude.models.retrieve(MODEL)
    assert str(model._request_id).startswith("req_")


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_what_reaches_the_upstream(
    claude: Anthropic, keyed_upstream: str, upstream_api: str
) -> None:
    clear(keyed_upstream)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
    }
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ]
    create(
        claude,
        messages,
        max_tokens=300,
        system=[{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        tools=TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        stop_sequences=["STOP"],
        extra_body={"temperature": 0.5, "top_k": 7},  # SDK 2.14 has no arguments for them
        metadata={"user_id": "u-1"},
        service_tier="standard_only",
        extra_headers={"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"},
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    [sent] = upstream_log(keyed_upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["response_format"]["json_schema"]["schema"] == SCHEMA
        assert body["messages"][0] == {"role": "system", "content": "rules"}
        assert body["messages"][1]["content"][1] == {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBO", "detail": "auto"},
        }
        assert body["messages"][2]["tool_calls"][0]["id"] == "toolu_1"
        assert body["messages"][3] == {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "content": "sunny",
        }
        assert (body["stop"], body["max_tokens"], body["top_k"]) == (["STOP"], 300, 7)
        assert (body["tool_choice"], body["parallel_tool_calls"]) == ("required", False)
        assert (body["temperature"], body["user"]) == (0.5, "u-1")
        assert body["service_tier"] == "default"
        assert sent["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert "anthropic-beta" not in sent["headers"]  # Anthropic's betas, for Anthropic
    elif upstream_api == "anthropic":
        assert sent["headers"]["x-api-key"] == UPSTREAM_KEY
        betas = "claude-code-20250219,interleaved-thinking-2025-05-14"
        assert sent["headers"]["anthropic-beta"] == betas
        assert "authorization" not in sent["headers"]
        assert sent["headers"]["anthropic-version"] == "2023-06-01"
        assert body["system"] == [
            {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}
        ]
        assert body["messages"] == messages
        assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
        assert (body["stop_sequences"], body["max_tokens"], body["top_k"]) == (["STOP"], 300, 7)
        assert body["metadata"] == {"user_id": "u-1"}
        assert body["service_tier"] == "standard_only"
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    else:
        assert body["text"]["format"]["schema"] == SCHEMA
        assert body["input"][0]["role"] == "system"
        assert body["max_output_tokens"] == 300
        assert body["tool_choice"] == "required"
        assert body["service_tier"] == "default"


@pytest.mark.parametrize("send", SEND)
def test_automatic_caching_and_a_whole_turns_thinking_budget(
    claude: Anthropic, keyed_upstream: str, upstream_api: str, send: Any
) -> None:
    """The SDK's top-level ``cache_control`` (automatic caching), and a thinking budget past
    ``max_tokens`` under the ``interleaved-thinking-2025-05-14`` beta (the whole turn's),
    answered by every upstream; an Anthropic upstream is sent both as they came."""
    clear(keyed_upstream)
    message = send(
        claude,
        [{"role": "user", "content": "[[reason:hm]] hi"}],
        max_tokens=2000,
        cache_control={"type": "ephemeral"},
        thinking={"type": "enabled", "budget_tokens": 4000},
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == "Hello! You said: hi"
    [sent] = upstream_log(keyed_upstream)
    if upstream_api == "anthropic":
        assert sent["body"]["cache_control"] == {"type": "ephemeral"}
        assert sent["body"]["thinking"] == {"type": "enabled", "budget_tokens": 4000}
        assert sent["body"]["max_tokens"] == 2000


class Weather(pydantic.BaseModel):
    city: str


def test_parse_fills_parsed_output_over_every_upstream(
    claude: Anthropic, keyed_upstream: str, upstream_api: str
) -> None:
    """The SDK's ``messages.parse(output_format=Model)`` (and its stream): the model's
    schema reaches each upstream as its structured output, and the answer written to it
    (the fake's ``[[say]]``) comes back as ``parsed_output``."""
    clear(keyed_upstream)
    asked: Any = [{"role": "user", "content": 'weather? [[say:{"city": "Paris"}]]'}]
    parsed = claude.messages.parse(
        model=MODEL, max_tokens=100, messages=asked, output_format=Weather
    )
    assert parsed.parsed_output == Weather(city="Paris")
    with claude.messages.stream(
        model=MODEL, max_tokens=100, messages=asked, output_format=Weather
    ) as stream:
        for _ in stream:
            pass
        assert stream.get_final_message().parsed_output == Weather(city="Paris")
    sent = upstream_log(keyed_upstream)[0]["body"]
    if upstream_api == "chat":
        assert sent["response_format"]["json_schema"]["strict"] is True
        schema = sent["response_format"]["json_schema"]["schema"]
    elif upstream_api == "anthropic":
        schema = sent["output_config"]["format"]["schema"]
    else:
        assert sent["text"]["format"]["strict"] is True
        schema = sent["text"]["format"]["schema"]
    assert (schema["required"], schema["additionalProperties"]) == (["city"], False)


def test_thinking_disabled_is_told_to_an_anthropic_upstream_only(
    claude: Anthropic, keyed_upstream: str, upstream_api: str
) -> None:
    """``thinking: disabled`` tells an Anthropic upstream ``disabled`` (newer models think
    when ``thinking`` is left out); Chat and Responses upstreams are asked nothing for it,
    as for a request without ``thinking`` (not every server takes the effort ``none``)."""
    clear(keyed_upstream)
    create(claude, [{"role": "user", "content": "unasked"}])
    streamed(claude, [{"role": "user", "content": "off"}], thinking={"type": "disabled"})
    unasked, off = (entry["body"] for entry in upstream_log(keyed_upstream))
    assert not {"thinking", "reasoning_effort", "reasoning"} & set(unasked)
    if upstream_api == "anthropic":
        assert off["thinking"] == {"type": "disabled"}
    else:
        assert not {"thinking", "reasoning_effort", "reasoning"} & set(off)


def test_message_start_counts_the_prompt_as_an_anthropic_upstream_did(
    claude: Anthropic, upstream_api: str
) -> None:
    """An Anthropic upstream counts the prompt in its ``message_start``: the client's has
    that count, as Anthropic's would; other upstreams count only at the end (zeros). The
    final ``message_delta``'s cumulative counts, which the SDK takes over the start's,
    make the streamed message's usage the unstreamed one's over every upstream."""
    asked: Any = {"model": MODEL, "max_tokens": 100}
    asked["messages"] = [{"role": "user", "content": "count me"}]
    with claude.messages.stream(**asked) as stream:
        starts = [
            (event.message.usage.input_tokens, event.message.usage.cache_read_input_tokens)
            for event in stream
            if event.type == "message_start"
        ]
        final = stream.get_final_message()
    assert final.usage.input_tokens > 0
    counted = final.usage.input_tokens if upstream_api == "anthropic" else 0
    assert starts == [(counted, 0)]
    assert final.usage == claude.messages.create(**asked).usage


def test_a_custom_content_documents_images_reach_the_model(
    claude: Anthropic, keyed_upstream: str, upstream_api: str
) -> None:
    """A document of custom content may hold images among its text blocks (the SDK's
    ``ContentBlockSourceContentParam``): an Anthropic upstream gets the document as it was
    sent; the others its text, then its images, in a user message and in a tool result."""
    png = {"type": "base64", "media_type": "image/png", "data": "iVBO"}
    image = {"type": "image", "source": png}
    source = {"type": "content", "content": [{"type": "text", "text": "one "}, image]}
    document: Any = {"type": "document", "source": source, "title": "T"}
    use = {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_7", "content": [document]}
    messages: Any = [
        {"role": "user", "content": [document, {"type": "text", "text": "look"}]},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    clear(keyed_upstream)
    create(claude, messages, tools=TOOLS)
    [sent] = upstream_log(keyed_upstream)
    body = sent["body"]
    if upstream_api == "anthropic":
        assert body["messages"][0]["content"] == [document, {"type": "text", "text": "look"}]
        assert body["messages"][2]["content"][0]["content"] == [document]
    elif upstream_api == "chat":
        user = body["messages"][0]["content"]
        assert [part["type"] for part in user] == ["text", "image_url", "text"]
        assert user[0]["text"].endswith("one ")
        assert user[1]["image_url"]["url"] == "data:image/png;base64,iVBO"
        assert body["messages"][2]["role"] == "tool"
        assert [part["type"] for part in body["messages"][3]["content"]][-1] == "image_url"
    else:
        user = body["input"][0]["content"]
        assert [part["type"] for part in user] == ["input_file", "input_image", "input_text"]
        assert user[1]["image_url"] == "data:image/png;base64,iVBO"
        assert set(user[1]) == {"type", "image_url", "detail"}
        output = body["input"][2]["output"]
        assert [part["type"] for part in output] == ["input_file", "input_image"]


def test_search_results_and_cited_text_reach_the_model(claude: Anthropic) -> None:
    """A ``search_result`` block in a user message, and an earlier answer's text block with
    ``citations`` (here of the gateway's own web search, which no upstream can check):
    every upstream gets their text (an Anthropic one the search result block itself)."""
    hit = {
        "type": "search_result",
        "source": "https://a.test/",
        "title": "A",
        "content": [{"type": "text", "text": "About a."}],
    }
    citation = {
        "type": "web_search_result_location",
        "url": "https://a.test/",
        "title": "A",
        "encrypted_index": "c3J2dG9vbHVfYTow",
        "cited_text": "About a.",
    }
    messages: Any = [
        {"role": "user", "content": [hit, {"type": "text", "text": "what is a?"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "A is a.", "citations": [citation]}],
        },
        {"role": "user", "content": "[[echo]]"},
    ]
    transcript = create(claude, messages).content[0].text
    assert "About a." in transcript
    assert "A is a." in transcript


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
def test_every_effort_level_reaches_the_upstream_as_asked(
    claude: Anthropic, keyed_upstream: str, upstream_api: str, effort: Any
) -> None:
    """Adaptive thinking's ``output_config.effort``, every level the SDK types, is the
    effort each upstream is asked for: ``max`` too, which the other APIs also know."""
    clear(keyed_upstream)
    thinking: Any = {"type": "adaptive"}
    create(
        claude,
        [{"role": "user", "content": "hi"}],
        thinking=thinking,
        output_config={"effort": effort},
    )
    [sent] = upstream_log(keyed_upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["reasoning_effort"] == effort
    elif upstream_api == "anthropic":
        assert (body["thinking"], body["output_config"]) == (thinking, {"effort": effort})
    else:
        assert body["reasoning"]["effort"] == effort


def test_an_effort_without_thinking_reaches_an_anthropic_upstream_only(
    claude: Anthropic, keyed_upstream: str, upstream_api: str
) -> None:
    """``output_config.effort`` without adaptive thinking (none, ``disabled``, a budget):
    Anthropic applies it to the whole answer, so an Anthropic upstream gets it as asked;
    Chat and Responses upstreams are asked no effort beyond the thinking's, as before."""
    clear(keyed_upstream)
    hi: Any = [{"role": "user", "content": "hi"}]
    create(claude, hi, output_config={"effort": "low"})
    create(claude, hi, thinking={"type": "disabled"}, output_config={"effort": "medium"})
    enabled: Any = {"type": "enabled", "budget_tokens": 1024}
    create(claude, hi, thinking=enabled, output_config={"effort": "max"})
    unasked, disabled, budget = (entry["body"] for entry in upstream_log(keyed_upstream))
    if upstream_api == "anthropic":
        assert unasked["output_config"] == {"effort": "low"}
        assert "thinking" not in unasked
        assert (disabled["thinking"], disabled["output_config"]) == (
            {"type": "disabled"},
            {"effort": "medium"},
        )
        assert (budget["thinking"], budget["output_config"]) == (enabled, {"effort": "max"})
    else:
        for body in (unasked, disabled):
            assert not {"output_config", "reasoning_effort", "reasoning"} & set(body)
        assert "output_config" not in budget


AI_SDK_EFFORT_CHANGE = {
    "model": MODEL,
    "max_tokens": 4000,
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "high"},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Plan a migration"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "1. Export."}]},
        {"role": "system", "content": [], "output_config": {"effort": "low"}},
        {"role": "user", "content": [{"type": "text", "text": "Sum up"}]},
    ],
}
"""What the Vercel AI SDK (ai 6.0.333, @ai-sdk/anthropic 3.0.140) sends for a system
message with ``providerOptions.anthropic.effort``: Anthropic's per-message effort."""
AI_SDK_BLOCK_BINDING = {
    "model": MODEL,
    "max_tokens": 4000,
    "thinking": {"block_binding": {"prefix_mismatch_behavior": "drop_block"}},
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
}
"""... and for ``thinking: {blockBinding: {prefixMismatchBehavior: "drop_block"}}``."""


def test_the_ai_sdks_per_message_effort_and_block_binding_are_taken(
    messages_gateway: str, keyed_upstream: str, upstream_api: str
) -> None:
    """A per-message effort is the effort the upstream is asked for from the turn it
    starts at; a ``thinking`` of only its ``block_binding`` is thinking left out."""
    clear(keyed_upstream)
    replay(messages_gateway, AI_SDK_EFFORT_CHANGE)
    [sent] = upstream_log(keyed_upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["reasoning_effort"] == "low"
    elif upstream_api == "anthropic":
        assert body["output_config"] == {"effort": "low"}
    else:
        assert body["reasoning"]["effort"] == "low"
    bound = replay(messages_gateway, AI_SDK_BLOCK_BINDING)
    assert [block["type"] for block in bound["content"]] == ["text"]


def replay(gateway: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` sent as it was captured; the message answered (an error raises)."""
    headers = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}
    headers["content-type"] = "application/json"
    request = urllib.request.Request(
        gateway + "/v1/messages", data=orjson.dumps(body), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request) as reply:
        answer: dict[str, Any] = orjson.loads(reply.read())
    return answer


@pytest.mark.parametrize("send", SEND)
def test_a_prefilled_answer_is_continued(
    claude: Anthropic, send: Any, keyed_upstream: str, upstream_api: str
) -> None:
    """A last assistant message is continued (Anthropic's prefill): a Chat upstream is
    asked to continue it, as vLLM takes it; an Anthropic upstream gets it as the last
    message. A Responses upstream cannot continue a message, and is not asked to."""
    clear(keyed_upstream)
    prefill = {"role": "assistant", "content": '{"answer":'}  # no trailing space: refused
    message = send(claude, [{"role": "user", "content": "say it as JSON"}, prefill])
    assert message.content[0].type == "text"
    [sent] = upstream_log(keyed_upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["messages"][-1] == prefill
        assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)
    elif upstream_api == "anthropic":
        assert body["messages"][-1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": '{"answer":'}],
        }
    else:
        assert "continue_final_message" not in body

    clear(keyed_upstream)  # a conversation ending in a tool result is not a prefill
    use = {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"}
    send(
        claude,
        [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
        tools=TOOLS,
    )
    [sent] = upstream_log(keyed_upstream)
    assert "continue_final_message" not in sent["body"]


@pytest.mark.parametrize("send", SEND)
def test_a_stop_sequence(claude: Anthropic, send: Any) -> None:
    """Over every upstream: Anthropic's and a Chat upstream's own (vLLM names the one
    that matched), and the gateway's over a Responses upstream, which has no such field."""
    message = send(
        claude, [{"role": "user", "content": "alpha beta gamma"}], stop_sequences=["gamma"]
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "gamma")
    assert [block.text for block in message.content] == ["Hello! You said: alpha beta "]


@pytest.mark.parametrize("send", SEND)
def test_an_upstream_500_before_output(claude: Anthropic, send: Any) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        send(claude, [{"role": "user", "content": "[[error:500]]"}])
    assert caught.value.status_code >= 500
    assert caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert caught.value.response.headers["request-id"].startswith("req_")


def test_an_overloaded_upstream(claude: Anthropic, upstream_api: str) -> None:
    status = 529 if upstream_api == "anthropic" else 503
    with pytest.raises(anthropic.OverloadedError) as caught:  # Anthropic's 529, as Claude
        create(claude, [{"role": "user", "content": f"[[error:{status}]]"}])  # Code knows it
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@pytest.mark.parametrize("send", SEND)
def test_an_upstream_413(claude: Anthropic, send: Any) -> None:
    """A request too large for the model server is a 413 ``request_too_large``, as hosted
    answers one (the SDK's ``ContentTooLargeError``), over every upstream."""
    with pytest.raises(anthropic.ContentTooLargeError) as caught:
        send(claude, [{"role": "user", "content": "[[error:413]]"}])
    assert caught.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert caught.value.request_id == caught.value.body["request_id"]  # type: ignore[index]


def test_a_stream_cut_mid_way(claude: Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        streamed(claude, [{"role": "user", "content": "[[cut:2]] one two three four"}])
    assert caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]


def test_a_missing_max_tokens_is_named(messages_gateway: str) -> None:
    request = urllib.request.Request(
        messages_gateway + "/v1/messages",
        data=orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}),
        headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    with caught.value as reply:
        error = orjson.loads(reply.read())
    assert caught.value.code == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"]


@pytest.fixture(scope="module")
def responses_over_anthropic(
    keyed_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenAI]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", keyed_upstream, "--upstream-api", "anthropic", "--database", database]
    args += ["--upstream-api-key-env", "E2E_UPSTREAM_KEY"]
    with (
        start_gateway(args, env={"E2E_UPSTREAM_KEY": UPSTREAM_KEY}) as url,
        OpenAI(base_url=url + "/v1", api_key="client", max_retries=0) as sdk,
    ):
        yield sdk


def test_responses_over_the_anthropic_backend(responses_over_anthropic: OpenAI) -> None:
    client = responses_over_anthropic
    plain = client.responses.create(model=MODEL, input="hello", instructions="be nice")
    assert plain.output_text == "Hello! You said: hello"
    assert plain.usage is not None
    assert plain.usage.input_tokens > 0
    with client.responses.stream(model=MODEL, input="streamed words") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hello! You said: streamed words"


def test_responses_tool_and_reasoning_round_trip_over_anthropic(
    responses_over_anthropic: OpenAI,
) -> None:
    client = responses_over_anthropic
    tools: list[Any] = [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    ]
    first = client.responses.create(
        model=MODEL,
        input=f"[[reason:consider]] {TOOL_PROMPT}",
        tools=tools,
        reasoning={"effort": "low"},
        max_output_tokens=4000,
    )
    reasoning, call = first.output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content is not None
    assert reasoning.encrypted_content.startswith("sw1.")  # the signature, sealed over
    assert call.type == "function_call"
    # The stored reasoning goes back upstream signed, or the fake would refuse it.
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "hail"}],
        tools=tools,
        reasoning={"effort": "low"},
        max_output_tokens=4000,
    )
    assert second.output_text == "Tool said: hail"


def test_responses_errors_over_anthropic(responses_over_anthropic: OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        responses_over_anthropic.responses.create(model=MODEL, input="[[error:529]]")
    assert caught.value.status_code == 503


def test_the_anthropic_backend_in_a_config_file(keyed_upstream: str, tmp_path: Path) -> None:
    from tests.e2e.configured import configured_gateway

    backend = {
        "url": keyed_upstream,
        "api": "anthropic",
        "api_key_env": "E2E_UPSTREAM_KEY",
        "anthropic_version": "2024-01-01",
        "default_max_tokens": 333,
    }
    with configured_gateway(tmp_path, backend, env={"E2E_UPSTREAM_KEY": UPSTREAM_KEY}) as gateway:
        clear(keyed_upstream)
        with OpenAI(base_url=gateway.url + "/v1", api_key="c", max_retries=0) as client:
            client.responses.create(model=MODEL, input="hi")
    [sent] = upstream_log(keyed_upstream)
    assert sent["headers"]["anthropic-version"] == "2024-01-01"
    assert sent["body"]["max_tokens"] == 333


def test_the_beta_route(claude: Anthropic) -> None:
    message = claude.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": "beta hello"}],
        betas=["interleaved-thinking-2025-05-14", "context-management-2025-06-27"],
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello! You said: beta hello"


def test_a_claude_code_shaped_request(messages_gateway: str, upstream_api: str) -> None:
    """What Claude Code sends (see shared/clients.md), streamed back whole. A Chat upstream
    (whose template refuses a system message that is not first) gets the environment as a
    reminder after the prompt."""
    body = {
        "model": MODEL,
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {
                "type": "text",
                "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"},
            },
            {
                "type": "text",
                "text": "Be concise.",
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            },
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                    {"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "# Environment\nlinux"}]},
        ],
        "tools": [
            {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
            {"name": "Later", "input_schema": {"type": "object"}, "defer_loading": True},
        ],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'},
    }
    request = urllib.request.Request(
        messages_gateway + "/v1/messages?beta=true",
        data=orjson.dumps(body),
        headers={
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
            "context-management-2025-06-27,effort-2025-11-24",
            "authorization": "Bearer t",
        },
    )
    with urllib.request.urlopen(request) as reply:
        assert reply.headers["request-id"].startswith("req_")
        frames = reply.read().split(b"\n\n")[:-1]
    events = [orjson.loads(f.split(b"\n")[1].removeprefix(b"data: ")) for f in frames]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    environment = "<system-reminder>\n# Environment\nlinux\n</system-reminder>"
    assert text.endswith("Say hi" + (environment if upstream_api == "chat" else ""))
    assert events[-1] == {"type": "message_stop"}
