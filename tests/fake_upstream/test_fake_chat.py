"""The fake upstream's Chat Completions wire, driven with the official SDK."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import openai
import orjson
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionChunk

from stateway.fake_upstream.chat import CONTENT_REQUIRED, SYSTEM_NOT_FIRST, parse_chat_request
from stateway.fake_upstream.chat_tools import ToolServer
from stateway.fake_upstream.errors import UpstreamError
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.fake_upstream.listing import Windows


def _ask(client: OpenAI, text: str, **kwargs: Any) -> Any:
    messages = kwargs.pop("messages", [{"role": "user", "content": text}])
    return client.chat.completions.create(model="any-model", messages=messages, **kwargs)


def _stream(client: OpenAI, text: str, **kwargs: Any) -> list[ChatCompletionChunk]:
    return list(_ask(client, text, stream=True, **kwargs))


def _collect(stream: Iterable[ChatCompletionChunk], into: list[ChatCompletionChunk]) -> None:
    for chunk in stream:
        into.append(chunk)


def _content(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_default_reply(client: OpenAI) -> None:
    completion = _ask(client, "  ping pong  ")
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "any-model"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello! You said: ping pong"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (2, 5, 7)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0


def test_streamed_reply_one_word_per_chunk(client: OpenAI) -> None:
    chunks = _stream(client, "ping pong", stream_options={"include_usage": True})
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    words = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert words == ["Hello! ", "You ", "said: ", "ping ", "pong"]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5


def test_stream_without_usage(client: OpenAI) -> None:
    chunks = _stream(client, "hi")
    assert all(chunk.usage is None for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert _content(chunks) == "Hello! You said: hi"


def test_echo_transcript(client: OpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look: "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"x": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
        {"role": "assistant", "content": "It is a cat.", "reasoning_content": "Cats purr."},
        {"role": "user", "content": "[[echo]] thanks"},
    ]
    expected = (
        "system: Be brief.\n"
        "developer: Use tools.\n"
        "user: Look: <image>\n"
        'assistant->look({"x": 1})\n'
        "tool[call_1]: a cat\n"
        "reasoning: Cats purr.\n"
        "assistant: It is a cat.\n"
        "user: [[echo]] thanks"
    )
    assert _ask(client, "", messages=messages).choices[0].message.content == expected
    assert _content(_stream(client, "", messages=messages)) == expected
    messages[-1] = {"role": "user", "content": "[[tail:2]] thanks"}
    last = _ask(client, "", messages=messages).choices[0].message.content
    assert last == "assistant: It is a cat.\nuser: [[tail:2]] thanks"


def test_tool_result_reply(client: OpenAI) -> None:
    messages: list[Any] = [
        {"role": "user", "content": '[[tool:weather:{"city": "Paris"}]]'},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny"},
    ]
    completion = _ask(client, "", messages=messages)
    assert completion.choices[0].message.content == "Tool said: sunny"
    assert completion.choices[0].finish_reason == "stop"


def test_single_tool_call(client: OpenAI) -> None:
    arguments = {"city": "Paris", "days": [[1, 2], [3]]}
    completion = _ask(client, f"[[tool:get_weather:{json.dumps(arguments)}]]")
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == arguments
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 1


def test_parallel_tool_calls_streamed(client: OpenAI) -> None:
    text = '[[tool:a:{"n": "first call"}]] [[tool:b:{"n": 2}]]'
    chunks = _stream(client, text)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks[1:-1]:
        for fragment in chunk.choices[0].delta.tool_calls or []:
            assert fragment.function is not None
            if fragment.id is not None:
                assert fragment.index not in calls
                assert fragment.type == "function"
                assert fragment.function.arguments == ""
                calls[fragment.index] = {"id": fragment.id, "name": fragment.function.name or ""}
                calls[fragment.index]["arguments"] = ""
            else:
                assert fragment.function.name is None
                assert len(fragment.function.arguments or "") <= 8
                calls[fragment.index]["arguments"] += fragment.function.arguments or ""
    assert [call["name"] for call in calls.values()] == ["a", "b"]
    assert [json.loads(call["arguments"]) for call in calls.values()] == [
        {"n": "first call"},
        {"n": 2},
    ]
    assert len({call["id"] for call in calls.values()}) == 2
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    again = _ask(client, text).choices[0].message.tool_calls
    assert again is not None
    assert not {call.id for call in again} & {call["id"] for call in calls.values()}


def test_interleaved_tool_calls_streamed(client: OpenAI) -> None:
    """``[[interleave]]``: both calls open, then their argument pieces take turns."""
    text = '[[tool:a:{"n": "first call"}]] [[tool:b:{"n": "second"}]] [[interleave]]'
    fragments = [
        fragment
        for chunk in _stream(client, text)
        if chunk.choices
        for fragment in chunk.choices[0].delta.tool_calls or []
    ]
    assert [(f.index, f.id is not None) for f in fragments[:3]] == [
        (0, True),
        (1, True),
        (0, False),
    ]
    assert [f.index for f in fragments[2:6]] == [0, 1, 0, 1]
    arguments = ["", ""]
    for fragment in fragments:
        assert fragment.function is not None
        arguments[fragment.index] += fragment.function.arguments or ""
    assert [json.loads(a) for a in arguments] == [{"n": "first call"}, {"n": "second"}]
    whole = _ask(client, text).choices[0].message.tool_calls
    assert whole is not None
    assert [json.loads(c.function.arguments) for c in whole] == [  # type: ignore[union-attr]
        {"n": "first call"},
        {"n": "second"},
    ]


def test_new_ids_give_each_argument_piece_an_id_of_its_own(client: OpenAI) -> None:
    """``[[newids]]``: a call opens under its id, and each of its argument pieces comes
    under another, named by no function."""
    text = '[[tool:a:{"n": "first call"}]] [[newids]]'
    fragments = [
        fragment
        for chunk in _stream(client, text)
        if chunk.choices
        for fragment in chunk.choices[0].delta.tool_calls or []
    ]
    opening, *pieces = fragments
    assert opening.function is not None
    assert opening.function.name == "a"
    assert len(pieces) > 1
    assert len({opening.id, *(piece.id for piece in pieces)}) == len(fragments)
    assert all(piece.function is not None and piece.function.name is None for piece in pieces)
    arguments = "".join((piece.function.arguments or "") for piece in pieces)  # type: ignore[union-attr]
    assert json.loads(arguments) == {"n": "first call"}


def test_sglang_reports_reasoning_tokens_beside_the_other_counts(client: OpenAI) -> None:
    """``[[sglang]]``: ``usage.reasoning_tokens``, no ``completion_tokens_details``,
    streamed (with ``include_usage``) or not."""
    text = "[[reason:a b c]] [[sglang]] hi"
    whole = _ask(client, text).usage
    [last] = [c for c in _stream(client, text, stream_options={"include_usage": True})][-1:]
    for usage in (whole, last.usage):
        assert usage is not None
        assert usage.completion_tokens_details is None
        assert usage.model_extra == {"reasoning_tokens": 3}


def test_stop_ends_the_text_as_vllm_does(client: OpenAI) -> None:
    """Before the first ``stop`` string the text holds, naming it as ``stop_reason``."""
    completion = _ask(client, "alpha beta gamma", stop=["gamma", "beta"])
    choice = completion.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hello! You said: alpha ", "stop")
    assert (choice.model_extra or {})["stop_reason"] == "beta"
    chunks = _stream(client, "alpha beta gamma", stop="gamma")
    assert _content(chunks) == "Hello! You said: alpha beta "
    last = chunks[-1].choices[0]
    assert (last.finish_reason, (last.model_extra or {})["stop_reason"]) == ("stop", "gamma")
    assert "stop_reason" not in (_ask(client, "alpha").choices[0].model_extra or {})


def test_reasoning(client: OpenAI) -> None:
    completion = _ask(client, "hi [[reason:Let me think.]]")
    message = completion.choices[0].message
    assert message.content == "Hello! You said: hi"
    assert (message.model_extra or {})["reasoning_content"] == "Let me think."
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 3
    chunks = _stream(client, "hi [[reason:Let me think.]]")
    reasoning = [(c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks]
    assert [r for r in reasoning if r] == ["Let ", "me ", "think."]
    assert _content(chunks) == "Hello! You said: hi"


def test_reasoning_in_think_tags(client: OpenAI) -> None:
    """``[[think]]``: the reasoning opens the content between ``<think>`` tags, as a
    server without a reasoning parser passes on what the model wrote; no reasoning field."""
    text = "hi [[reason:Let me think.]] [[think]]"
    message = _ask(client, text).choices[0].message
    assert message.content == "<think>\nLet me think.\n</think>\n\nHello! You said: hi"
    assert "reasoning_content" not in (message.model_extra or {})
    chunks = _stream(client, text)
    assert _content(chunks) == message.content
    assert not any((c.choices[0].delta.model_extra or {}) for c in chunks if c.choices)
    called = _ask(client, "[[reason:Tools.]] [[think]] [[tool:f:{}]]").choices[0].message
    assert called.content == "<think>\nTools.\n</think>\n\n"
    assert called.tool_calls is not None
    assert _ask(client, "hi [[think]]").choices[0].message.content == "Hello! You said: hi"


def test_words_and_length(client: OpenAI) -> None:
    completion = _ask(client, "[[words:300]]")
    assert completion.choices[0].message.content == " ".join(f"w{i}" for i in range(1, 301))
    assert len(_stream(client, "[[words:300]]")) == 302
    assert _ask(client, "x [[length]]").choices[0].finish_reason == "length"


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_truncates(client: OpenAI, limit: str) -> None:
    completion = _ask(client, "[[words:10]]", **{limit: 4})
    assert completion.choices[0].message.content == "w1 w2 w3 w4"
    assert completion.choices[0].finish_reason == "length"
    chunks = _stream(client, "[[words:10]]", **{limit: 4})
    assert _content(chunks) == "w1 w2 w3 w4"
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("status", "error_class", "error_type", "code"),
    [
        (400, openai.BadRequestError, "invalid_request_error", None),
        (401, openai.AuthenticationError, "authentication_error", "invalid_api_key"),
        (404, openai.NotFoundError, "not_found_error", "model_not_found"),
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error", None),
        (503, openai.InternalServerError, "server_error", None),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_scripted_errors(
    client: OpenAI,
    status: int,
    error_class: type[openai.APIStatusError],
    error_type: str,
    code: str | None,
    stream: bool,
) -> None:
    with pytest.raises(error_class) as raised:
        _ask(client, f"[[error:{status}]] [[words:3]]", stream=stream)
    assert raised.value.status_code == status
    assert raised.value.type == error_type
    assert raised.value.code == code
    retry_after = raised.value.response.headers.get("retry-after")
    assert retry_after == {429: "1", 503: "2"}.get(status)


def test_cut_mid_stream(client: OpenAI) -> None:
    stream = _ask(client, "[[words:10]] [[cut:3]]", stream=True)
    received: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIConnectionError):
        _collect(stream, received)
    assert _content(received) == "w1 w2 w3 "
    assert all(chunk.choices[0].finish_reason is None for chunk in received)


def test_cut_after_every_chunk_still_truncates(client: OpenAI) -> None:
    with pytest.raises(openai.APIConnectionError):
        list(_ask(client, "[[words:2]] [[cut:99]]", stream=True))


def test_cut_without_stream_drops_the_connection(client: OpenAI) -> None:
    with pytest.raises(openai.APIConnectionError):
        _ask(client, "[[cut:0]]")


def test_slow(client: OpenAI) -> None:
    assert _ask(client, "hi [[slow:20]]").choices[0].message.content == "Hello! You said: hi"
    assert _content(_stream(client, "hi [[slow:5]]")) == "Hello! You said: hi"


@pytest.fixture(scope="module")
def strict_client() -> Iterator[OpenAI]:
    """A fake upstream whose chat template takes a system message only first."""
    with (
        start_fake_upstream(system_first=True) as url,
        OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=10) as sdk,
    ):
        yield sdk


@pytest.mark.parametrize("role", ["system", "developer"])
def test_a_strict_template_refuses_a_system_message_not_first(
    strict_client: OpenAI, role: str
) -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": role, "content": "# Environment"},
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        _ask(strict_client, "", messages=messages)
    assert raised.value.message.endswith(SYSTEM_NOT_FIRST)
    assert raised.value.param == "messages[2]"
    with pytest.raises(openai.BadRequestError):
        _ask(strict_client, "", messages=[messages[0], messages[0], messages[1]])


def test_a_strict_template_takes_one_leading_system_message(strict_client: OpenAI) -> None:
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}]
    answer = _ask(strict_client, "", messages=messages)
    assert answer.choices[0].message.content == "Hello! You said: hi"


def test_listed_efforts_are_the_only_ones_taken_as_an_older_vllm_takes_them() -> None:
    """``reasoning_efforts``: another ``reasoning_effort`` is a 400 naming the field."""
    with (
        start_fake_upstream(reasoning_efforts=("low", "medium", "high")) as url,
        OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=10) as narrow,
    ):
        assert _ask(narrow, "hi", reasoning_effort="high").choices[0].message.content
        assert _ask(narrow, "hi").choices[0].message.content  # no effort
        with pytest.raises(openai.BadRequestError) as refused:
            _ask(narrow, "hi", reasoning_effort="xhigh")
    assert refused.value.param == "reasoning_effort"
    assert refused.value.message.endswith("Input should be 'low', 'medium' or 'high'")


def test_the_reasoning_field_vllm_names_is_the_only_one_written_and_read() -> None:
    """``reasoning_field="reasoning"``: the reasoning goes out as ``reasoning``, and of an
    assistant message's reasoning only ``reasoning`` reaches the model, as vLLM reads it
    since it dropped ``reasoning_content``; by default either field reaches it."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "old name"},
        {"role": "assistant", "content": "Hi.", "reasoning": "new name"},
        {"role": "user", "content": "[[echo]]"},
    ]
    with (
        start_fake_upstream(reasoning_field="reasoning") as url,
        OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=10) as vllm,
    ):
        message = _ask(vllm, "hi [[reason:Let me think.]]").choices[0].message
        assert (message.model_extra or {}).get("reasoning") == "Let me think."
        assert "reasoning_content" not in (message.model_extra or {})
        chunks = _stream(vllm, "hi [[reason:Let me think.]]")
        fields = [set(c.choices[0].delta.model_extra or {}) for c in chunks if c.choices]
        assert {"reasoning"} in fields
        assert not any("reasoning_content" in f for f in fields)
        echoed = _ask(vllm, "", messages=messages).choices[0].message.content
    assert "old name" not in echoed
    assert "reasoning: new name" in echoed


def test_by_default_reasoning_is_read_back_from_either_field(client: OpenAI) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "old name"},
        {"role": "assistant", "content": "Hi.", "reasoning": "new name"},
        {"role": "user", "content": "[[echo]]"},
    ]
    echoed = _ask(client, "", messages=messages).choices[0].message.content
    assert "reasoning: old name" in echoed
    assert "reasoning: new name" in echoed


def test_by_default_every_effort_is_taken(client: OpenAI) -> None:
    for effort in ("none", "minimal", "xhigh", "max"):
        assert _ask(client, "hi", reasoning_effort=effort).choices[0].message.content


def test_by_default_a_system_message_may_stand_anywhere(client: OpenAI) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "later"}]
    answer = _ask(client, "", messages=messages)
    assert answer.choices[0].message.content == "Hello! You said: hi"


def test_logprobs_when_asked(client: OpenAI) -> None:
    completion = _ask(client, "ping pong", logprobs=True, top_logprobs=2)
    tokens = completion.choices[0].logprobs.content
    assert "".join(t.token for t in tokens) == completion.choices[0].message.content
    assert [len(t.top_logprobs) for t in tokens] == [2] * len(tokens)
    chunks = _stream(client, "ping pong", logprobs=True)
    streamed = [
        t
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content
    ]
    assert [t.token for t in streamed] == [t.token for t in tokens]
    assert all(t.top_logprobs == [] for t in streamed)
    assert _ask(client, "ping pong").choices[0].logprobs is None


@pytest.mark.parametrize("fields", [{"top_logprobs": 1}, {"logprobs": True, "top_logprobs": 21}])
def test_bad_logprobs_settings_are_refused(client: OpenAI, fields: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(client, "x", **fields)
    assert caught.value.body["param"] in ("logprobs", "top_logprobs")  # type: ignore[index]


FUNCTION_TOOL = {"type": "function", "function": {"name": "get_time"}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "run_sql"}}
ALLOWED = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [FUNCTION_TOOL]}}


@pytest.mark.parametrize(
    ("server", "tools", "choice", "refusal"),
    [
        ("openai", [FUNCTION_TOOL, CUSTOM_TOOL], ALLOWED, None),
        ("vllm", [FUNCTION_TOOL], None, None),
        ("vllm", [FUNCTION_TOOL, CUSTOM_TOOL], None, "tools.1.type\n  Input should be 'function'"),
        ("vllm", [FUNCTION_TOOL], ALLOWED, "tool_choice.type\n  Input should be 'function'"),
        ("llama.cpp", [FUNCTION_TOOL], ALLOWED, None),  # read as auto
        ("llama.cpp", [CUSTOM_TOOL], None, 'Unsupported tool type: {"type":"custom"'),
    ],
)
def test_tools_are_taken_as_the_server_played_takes_them(
    server: ToolServer, tools: list[Any], choice: Any, refusal: str | None
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    if choice is not None:
        body["tool_choice"] = choice
    if refusal is None:
        parse_chat_request(body, tool_server=server)
        return
    with pytest.raises(UpstreamError) as refused:
        parse_chat_request(body, tool_server=server)
    assert refused.value.status == 400
    assert refusal in refused.value.message


@pytest.mark.parametrize(
    ("windows", "server"),
    [(Windows(), "openai"), (Windows(max_model_len=8), "vllm"), (Windows(ctx_size=8), "llama.cpp")],
)
def test_the_window_told_tells_the_server_played(windows: Windows, server: str) -> None:
    assert windows.server == server


def test_cached_reports_part_of_the_prompt_read_from_the_cache(client: OpenAI) -> None:
    """``[[cached:N]]``: N of the prompt's tokens (its words, the directive's too) reported
    as cache reads, in the prompt's count; never more than the prompt."""
    usage = _ask(client, "one two three four [[cached:3]]").usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (5, 3)
    [last] = [
        c
        for c in _stream(client, "one two [[cached:9]]", stream_options={"include_usage": True})
        if c.usage
    ]
    assert last.usage is not None
    assert last.usage.prompt_tokens_details is not None
    assert (last.usage.prompt_tokens, last.usage.prompt_tokens_details.cached_tokens) == (3, 3)


CALLED = {
    "role": "assistant",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "c1", "content": "5"}


@pytest.mark.parametrize("content", [None, "missing"])
def test_a_server_requiring_content_refuses_null_in_lm_studio_s_words(content: Any) -> None:
    """``content_required``: a message whose content is null or missing is a 400 whose
    body is LM Studio's words alone (lmstudio-ai/lmstudio-bug-tracker#261)."""
    called = CALLED if content == "missing" else {**CALLED, "content": content}
    messages = [{"role": "user", "content": "hi"}, called, TOOL_RESULT]
    body = {"model": "m", "messages": messages}
    parse_chat_request(body)  # taken by default, as the spec has it
    with pytest.raises(UpstreamError) as refused:
        parse_chat_request(body, content_required=True)
    assert refused.value.status == 400
    assert orjson.loads(refused.value.body()) == {"error": CONTENT_REQUIRED}
    texted = [messages[0], {**CALLED, "content": ""}, TOOL_RESULT]
    parse_chat_request({**body, "messages": texted}, content_required=True)
