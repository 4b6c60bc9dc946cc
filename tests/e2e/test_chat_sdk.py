"""Chat Completions end to end: the official ``openai`` SDK against the real gateway, over
a Chat Completions upstream (the fast path: what the fake receives is what the client
sent) and a Responses upstream (translated), over SQLite and PostgreSQL."""

from __future__ import annotations

import time
import uuid
from typing import Any

import openai
import orjson
import pytest
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from pydantic import BaseModel

from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
]


def test_a_completion(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}]
    )
    choice = completion.choices[0]
    assert choice.message.content == "Hello! You said: hello"
    assert choice.finish_reason == "stop"
    assert completion.model == MODEL
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0


def test_a_stream_with_usage(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello [[reason:thinking first]]"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert text == "Hello! You said: hello"
    assert reasoning == "thinking first"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_tool_round_trip(client: OpenAI, stream: bool) -> None:
    messages: list[Any] = [{"role": "user", "content": '[[tool:lookup:{"k":1}]]'}]
    if stream:
        chunks = list(
            client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True)
        )
        calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        first = calls[0].choices[0].delta.tool_calls[0]  # type: ignore[index]
        call_id, name = first.id, first.function.name  # type: ignore[union-attr]
        arguments = "".join(
            c.choices[0].delta.tool_calls[0].function.arguments or ""  # type: ignore[index, union-attr]
            for c in calls
        )
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
    else:
        completion = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        assert completion.choices[0].finish_reason == "tool_calls"
        [tool_call] = completion.choices[0].message.tool_calls or []
        assert tool_call.type == "function"
        call_id, name, arguments = (
            tool_call.id,
            tool_call.function.name,
            tool_call.function.arguments,
        )
    assert (name, arguments) == ("lookup", '{"k":1}')
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "k is one"},
    ]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert answer.choices[0].message.content == "Tool said: k is one"
    assert answer.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_what_reaches_the_upstream(client: OpenAI, fake_upstream: str, stream: bool) -> None:
    """Fast path: the body is JSON-equal to the client's, vendor fields included."""
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hello", "name": "ann"},
    ]
    vendor = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    clear(fake_upstream)
    created = client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0.5, seed=3, stream=stream, extra_body=vendor
    )
    if stream:
        list(created)  # type: ignore[call-overload]
    [sent] = upstream_requests(fake_upstream)
    if not sent["path"].endswith("/chat/completions"):
        assert sent["body"]["input"][1]["content"][0]["text"] == "hello"  # translated
        return
    expected = {"model": MODEL, "messages": messages, "temperature": 0.5, "seed": 3, **vendor}
    assert sent["body"] == {**expected, "stream": stream}  # the SDK sends stream either way


def test_a_tool_is_strict_only_when_asked(client: OpenAI, fake_upstream: str) -> None:
    """A Chat tool without ``strict`` is not strict; a Responses upstream would make it
    strict (every property required) unless told ``strict: false``."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    tools: list[Any] = [
        {"type": "function", "function": {"name": "loose", "parameters": schema}},
        {"type": "function", "function": {"name": "tight", "parameters": schema, "strict": True}},
    ]
    marker = f"strict-{uuid.uuid4().hex}"
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], tools=tools
    )
    [sent] = [r for r in upstream_requests(fake_upstream) if marker in orjson.dumps(r).decode()]
    if sent["path"].endswith("/chat/completions"):  # the fast path: as sent
        assert sent["body"]["tools"] == tools
        return
    assert [tool.get("strict") for tool in sent["body"]["tools"]] == [False, True]


def test_the_stored_completion_routes_say_nothing_is_stored(client: OpenAI) -> None:
    """Hosted stores chat completions (``store: true``); the gateway keeps none, and the
    SDK's calls for them raise ``NotFoundError`` saying so, not a 405."""
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], store=True
    )
    calls = [
        lambda: client.chat.completions.list(),
        lambda: client.chat.completions.retrieve(completion.id),
        lambda: client.chat.completions.update(completion.id, metadata={"k": "v"}),
        lambda: client.chat.completions.delete(completion.id),
        lambda: client.chat.completions.messages.list(completion.id),
    ]
    for ask in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            ask()
        assert "stores no chat completion" in caught.value.message


class Weather(BaseModel):
    city: str


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdk_parses_a_strict_tools_call(client: OpenAI, stream: bool) -> None:
    """``chat.completions.parse()`` and the ``stream()`` helper read a call of a tool made
    from a pydantic model (strict, as the SDK declares it) as that model."""
    messages: Any = [{"role": "user", "content": '[[tool:Weather:{"city":"Paris"}]]'}]
    tools = [openai.pydantic_function_tool(Weather)]
    if stream:
        with client.chat.completions.stream(model=MODEL, messages=messages, tools=tools) as events:
            done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
            completion = events.get_final_completion()
        assert [event.parsed_arguments for event in done] == [Weather(city="Paris")]
    else:
        completion = client.chat.completions.parse(model=MODEL, messages=messages, tools=tools)
    [call] = completion.choices[0].message.tool_calls or []
    assert call.function.parsed_arguments == Weather(city="Paris")
    assert completion.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_parsed_as_none(client: OpenAI, stream: bool) -> None:
    """A model that declines a ``response_format`` gives ``parsed: None`` and its
    ``refusal``, as hosted's structured outputs do."""
    messages: Any = [{"role": "user", "content": "[[refuse:not that]]"}]
    if stream:
        with client.chat.completions.stream(
            model=MODEL, messages=messages, response_format=Weather
        ) as events:
            kinds = {event.type for event in events}
            completion = events.get_final_completion()
        assert {"refusal.delta", "refusal.done"} <= kinds
    else:
        completion = client.chat.completions.parse(
            model=MODEL, messages=messages, response_format=Weather
        )
    message = completion.choices[0].message
    assert (message.parsed, message.content, message.refusal) == (None, None, "not that")
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_reaches_the_client(client: OpenAI, stream: bool) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "[[error:429]]"}], stream=stream
        )
    assert caught.value.status_code == 429
    assert caught.value.response.headers.get("retry-after") == "1"


def test_bad_requests_are_400s(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[])  # fast path: upstream's 400
    assert caught.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as missing:
        client.post("/chat/completions", body={"messages": []}, cast_to=object)
    assert missing.value.param == "model"  # type: ignore[attr-defined]


def test_web_search_options_without_a_search_provider_say_what_to_configure(
    client: OpenAI,
) -> None:
    """This gateway has no search provider: the 400 names ``web_search_options`` and what
    to configure, not the Responses-only declaration a Chat client cannot send."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "news?"}], web_search_options={}
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("web_search_options", "unsupported_tool_type")
    assert "STATEWAY_WEB_SEARCH_PROVIDER" in error["message"]
    assert "external_web_access" not in error["message"]


def _final(chunks: Any) -> Any:
    """The completion the SDK accumulates from a stream's chunks."""
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return state.get_final_completion()


@pytest.mark.parametrize("stream", [False, True])
def test_stop_ends_the_text_at_the_first_stop_string(client: OpenAI, stream: bool) -> None:
    """Over a Chat upstream ``stop`` is the upstream's; a Responses upstream has no such
    field, so the gateway ends the text there itself, and the finish reason is ``stop``."""
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "alpha beta gamma"}],
        stop=["gam", "beta"],
        stream=stream,
    )
    completion = _final(answer) if stream else answer
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hello! You said: alpha ", "stop")


def test_a_stop_string_closes_the_upstream_stream(client: OpenAI, fake_upstream: str) -> None:
    """Where the gateway keeps ``stop`` (a Responses upstream), the upstream's stream is
    closed at it, not read to its end."""
    marker = f"stop-{uuid.uuid4().hex}"
    started = time.monotonic()
    chunks = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"{marker} [[words:200]] [[slow:25]]"}],
        stop="w3 ",
        stream=True,
    )
    completion = _final(chunks)
    assert time.monotonic() - started < 3  # the whole answer takes 5 s
    assert completion.choices[0].message.content == "w1 w2 "
    assert completion.choices[0].finish_reason == "stop"
    [sent] = [r for r in upstream_requests(fake_upstream) if marker in orjson.dumps(r).decode()]
    if sent["path"].endswith("/responses"):
        assert "stop" not in sent["body"]
        deadline = time.monotonic() + 5
        while not sent.get("disconnected") and time.monotonic() < deadline:
            time.sleep(0.05)
            [sent] = [
                r for r in upstream_requests(fake_upstream) if marker in orjson.dumps(r).decode()
            ]
        assert sent.get("disconnected") is True


@pytest.mark.parametrize("llamacpp", ["", "[[llamacpp]]"])
def test_a_stream_the_upstream_fails_part_way_raises_its_error(
    client: OpenAI, llamacpp: str
) -> None:
    """The upstream's mid-stream error event (vLLM's data line holding only ``error``, or
    llama.cpp's 2025 ``error:`` line, which an event-stream reader drops) ends the stream
    with the error the SDK raises, after the text that came before it: relayed on the
    fast path as on the translated one."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"[[words:20]] [[fail:3]] {llamacpp}"}],
        stream=True,
    )
    text, error = read_until_raised(stream)
    assert text.split() == ["w1", "w2", "w3"]
    assert "Scripted failure mid-stream" in error.message


def read_until_raised(stream: Any) -> tuple[str, openai.APIError]:
    """The text a client reads of ``stream`` before the error the SDK raises, and it."""
    texts: list[str] = []

    def read() -> None:
        for chunk in stream:
            texts.extend(c.delta.content or "" for c in chunk.choices)

    with pytest.raises(openai.APIError) as caught:
        read()
    return "".join(texts), caught.value


CHAT_UPSTREAMS = ["sqlite-chat", pytest.param("postgres-chat", marks=pytest.mark.postgres)]
"""The gateways (``tests/e2e/conftest.py``) over a Chat upstream, whose own stream endings
some tests script."""


@pytest.mark.parametrize("gateway", CHAT_UPSTREAMS, indirect=True)
def test_data_after_done_is_one_fault_relayed_or_translated(client: OpenAI) -> None:
    """A Chat upstream's ``[DONE]`` going on with more data in its event (``[[overrun]]``)
    is a malformed chunk, ``upstream_error``, on the fast path (the SDK raises it where the
    ``[DONE]`` event was, after the whole text; relayed, it would read that event as
    ``[DONE]``) as in a translated request's run (a Responses stream's failure, its code
    folded into the Responses wire's ``server_error``)."""
    content = "[[words:3]] [[overrun]]"
    chunks = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], stream=True
    )
    text, error = read_until_raised(chunks)
    assert text.split() == ["w1", "w2", "w3"]
    assert error.code == "upstream_error"
    assert "sent a malformed chunk" in error.message

    events = list(client.responses.create(model=MODEL, input=content, stream=True))
    assert events[-1].type == "response.failed"
    failure = events[-1].response.error
    assert failure is not None
    assert (failure.code, failure.message) == ("server_error", error.message)


def test_a_stream_ending_before_its_answer_raises(client: OpenAI) -> None:
    """An upstream stream that ends cleanly part-way (no finish, no ``[DONE]``: a proxy's
    timeout, a server dying between two events), which a client reading the bytes could
    not tell from a whole answer, ends with the error the SDK raises after the text that
    came before it: relayed on the fast path as on the translated one."""
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "[[words:20]] [[truncate:3]]"}],
        stream=True,
    )
    text, error = read_until_raised(stream)
    assert text.split() == ["w1", "w2", "w3"]
    assert error.code == "upstream_stream_cut"
    assert "closed the stream before finishing" in error.message


def test_a_cut_stream_asked_for_its_usage_ends_with_the_error_and_no_usage(
    client: OpenAI,
) -> None:
    """``include_usage`` asks for a usage chunk before ``[DONE]``; a stream cut part-way
    has neither: it ends with the error line, as hosted OpenAI's may ("if the stream is
    interrupted, you may not receive the final usage chunk"), never with a usage chunk of
    zeros for an answer whose upstream counted nothing. Relayed or translated alike."""
    reply = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "[[words:20]] [[truncate:3]]"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    events = [orjson.loads(e[6:]) for e in reply.http_response.read().split(b"\n\n") if e]
    *chunks, last = events
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks).split() == [
        "w1",
        "w2",
        "w3",
    ]
    assert all(c["choices"] and c["usage"] is None for c in chunks)  # no usage chunk
    assert last["error"]["code"] == "upstream_stream_cut"


@pytest.mark.parametrize("gateway", CHAT_UPSTREAMS, indirect=True)
def test_a_stream_read_a_byte_at_a_time_ends_as_it_came(client: OpenAI) -> None:
    """An upstream whose answer reaches the gateway a byte a read (``[[trickle]]``: its
    ``[DONE]`` too, split over fourteen reads) is judged at its end as a whole one is:
    relayed as it came, usage chunk and ``[DONE]`` last, no error line after them."""
    reply = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello [[trickle:1]]"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    body = reply.http_response.read()
    events = body.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    usage = orjson.loads(events[-3].removeprefix(b"data: "))
    assert (usage["choices"], usage["usage"]["completion_tokens"] > 0) == ([], True)
    assert b'"error"' not in body


@pytest.mark.parametrize("gateway", CHAT_UPSTREAMS, indirect=True)
def test_a_stream_done_before_any_output_raises(client: OpenAI) -> None:
    """vLLM's ``[DONE]`` alone (after an error it dropped before the first token): relayed
    as it came, an empty answer the client would take as the model's; it ends with the
    error a translated request gets instead."""
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi [[unanswered]]"}], stream=True
    )
    text, error = read_until_raised(stream)
    assert text == ""
    assert "ended its stream without an answer" in error.message


@pytest.mark.parametrize("gateway", CHAT_UPSTREAMS, indirect=True)
@pytest.mark.parametrize("reason", ["abort", "error"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_the_server_gave_up_on_raises(client: OpenAI, reason: str, stream: bool) -> None:
    """vLLM's ``finish_reason`` ``abort`` (its engine aborted the request: a shutdown, a
    pause, a scale-down) or ``error`` ends an answer cut short: a client that read it as
    finished would take the part for the whole. Streamed, the text comes, then the error
    the SDK raises; whole, a 502."""
    messages: Any = [{"role": "user", "content": f"[[words:3]] [[finish:{reason}]]"}]
    if not stream:
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model=MODEL, messages=messages)
        assert caught.value.status_code == 502
        assert f"'{reason}'" in caught.value.message
        return
    chunks = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    text, error = read_until_raised(chunks)
    assert text.split() == ["w1", "w2", "w3"]
    assert f"'{reason}'" in error.message


def test_reasoning_then_a_call_adds_up_to_the_completion(
    client: OpenAI, fake_upstream: str
) -> None:
    """An open model thinks, then calls a tool: the stream the SDK adds up is the
    completion, ``content`` null beside the call, though the stream's first chunk came with
    the reasoning, before the call was known. (Relayed on the fast path, the server's own
    chunks decide: vLLM, as the fake, opens every stream with ``content: ""``.)"""
    messages: Any = [{"role": "user", "content": "go [[reason:look it up]] [[tool:lookup:{}]]"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    clear(fake_upstream)
    chunks = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, stream=True
    )
    streamed = _final(chunks)
    [sent] = upstream_requests(fake_upstream)
    shown = [(c.choices[0].message, c.choices[0].finish_reason) for c in (whole, streamed)]
    for message, reason in shown:
        assert (message.model_extra or {})["reasoning_content"] == "look it up"
        assert [call.function.name for call in message.tool_calls or ()] == ["lookup"]  # type: ignore[union-attr]
        assert reason == "tool_calls"
    if sent["path"].endswith("/responses"):  # translated
        assert whole.choices[0].message.content is streamed.choices[0].message.content is None


TRANSLATED = ["sqlite-responses", "sqlite-anthropic"]
"""Gateways that translate every Chat request (``tests/e2e/conftest.py`` builds any
``<database>-<api>``)."""


def upstream_left(fake_upstream: str, marker: str) -> bool:
    """Whether the fake's request holding ``marker`` saw its client leave, waited for up
    to 5 s (the fake logs it as the gateway's connection closes)."""
    deadline = time.monotonic() + 5
    while True:
        [sent] = [r for r in upstream_requests(fake_upstream) if marker in orjson.dumps(r).decode()]
        if sent.get("disconnected") or time.monotonic() > deadline:
            return bool(sent.get("disconnected"))
        time.sleep(0.05)


@pytest.mark.parametrize("gateway", TRANSLATED, indirect=True)
def test_a_client_leaving_a_translated_stream_closes_the_upstream_request(
    client: OpenAI, fake_upstream: str
) -> None:
    """A client that stops reading part-way (the SDK's stream closed) ends the run: its
    upstream request is closed, not read to its end for no one."""
    marker = f"leave-{uuid.uuid4().hex}"
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"{marker} [[words:200]] [[slow:25]]"}],
        stream=True,
    )
    shown = ""
    for chunk in stream:
        shown += chunk.choices[0].delta.content or ""
        if "w2" in shown:
            break
    stream.close()
    assert upstream_left(fake_upstream, marker)


@pytest.mark.parametrize("gateway", TRANSLATED, indirect=True)
def test_a_client_leaving_a_translated_completion_closes_the_upstream_request(
    gateway: str, fake_upstream: str
) -> None:
    """A client that gives up on a whole answer (its read timing out) ends the run too."""
    marker = f"leave-{uuid.uuid4().hex}"
    sdk = OpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0, timeout=0.5)
    with sdk, pytest.raises(openai.APITimeoutError):
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"{marker} [[silence:10000]]"}]
        )
    assert upstream_left(fake_upstream, marker)
