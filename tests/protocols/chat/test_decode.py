"""The Chat Completions decoder: what a request becomes, and what it is refused for."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.chat.decode import ChatRequest, decode_chat, peek_chat

ASSISTANT_CALLS: dict[str, Any] = {
    "role": "assistant",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


def _function(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def decode(**fields: Any) -> ChatRequest:
    base: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return decode_chat({**base, **fields}, max_input_items=20)


def refused(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(**fields)
    return caught.value


def test_peek_reads_the_model_and_stream_only() -> None:
    call = peek_chat(b'{"model": "m", "stream": true, "n": 7, "chat_template_kwargs": {}}')
    assert (call.model, call.stream) == ("m", True)
    assert call.fields["n"] == 7
    assert call.needs_gateway is False
    searching = peek_chat(b'{"model": "m", "web_search_options": {}}')
    assert searching.needs_gateway is True  # the gateway's web search: never forwarded


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        (b"{nope", None, "invalid_json"),
        (b"[1]", None, "invalid_type"),
        (b'"text"', None, "invalid_type"),
        (b'{"messages": []}', "model", "missing_required_parameter"),
        (b'{"model": 3}', "model", "invalid_type"),
        (b'{"model": ""}', "model", "empty_string"),
    ],
)
def test_peek_refuses_what_cannot_be_routed(raw: bytes, param: str | None, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        peek_chat(raw)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_peek_words_a_model_of_another_type_as_the_body_check_does() -> None:
    """As on the Responses API, before routing as after."""
    with pytest.raises(InvalidRequest) as caught:
        peek_chat(b'{"model": 3}')
    assert caught.value.message == (
        "Invalid type for 'model': expected a string, but got an integer instead."
    )


def test_a_conversation_becomes_items_in_order() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "developer", "content": [{"type": "text", "text": "dev"}], "name": "ops"},
        {
            "role": "user",
            "name": "ann",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
                },
                {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
            ],
        },
        {
            "role": "assistant",
            "reasoning_content": "thinking",
            "content": "calling",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    items = decode(messages=messages).command.input
    assert [(i["type"], i.get("role")) for i in items] == [
        ("message", "system"),
        ("message", "developer"),
        ("message", "user"),
        ("reasoning", None),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
    ]
    assert items[1]["name"] == "ops"
    assert items[2]["name"] == "ann"
    assert items[2]["content"] == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"},
        {"type": "input_file", "file_id": "file-1", "filename": "a.pdf"},
    ]
    assert items[3]["content"] == [{"type": "reasoning_text", "text": "thinking"}]
    assert items[4]["content"] == [{"type": "output_text", "text": "calling"}]
    assert (items[5]["call_id"], items[5]["name"], items[5]["arguments"]) == ("c1", "f", "{}")
    assert (items[6]["call_id"], items[6]["output"]) == ("c1", "42")
    assert items[7]["content"] == [{"type": "refusal", "refusal": "no"}]


def test_an_image_at_its_original_detail_is_kept() -> None:
    """``original`` (full resolution) is among the SDK's detail levels."""
    image = {"url": "https://example.com/a.png", "detail": "original"}
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": image}]}]
    [item] = decode(messages=messages).command.input
    assert item["content"] == [
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "original"}
    ]


@pytest.mark.parametrize("url", ["file-abc123", "ftp://example.com/a.png", "a.png", "data"])
def test_an_image_url_neither_http_nor_data_is_refused_as_hosted_refuses_it(url: str) -> None:
    """A file id, another scheme or a bare path reaches no upstream as an image (the
    Responses API refuses them as ``input[i].content[j].image_url``): hosted Chat's 400,
    naming the URL's field."""
    image = {"type": "image_url", "image_url": {"url": url}}
    error = refused(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, image]}])
    param = "messages[0].content[1].image_url.url"
    assert (error.status, error.param, error.code) == (400, param, "invalid_value")
    assert error.message.startswith(f"Invalid image URL: '{param}'.")


@pytest.mark.parametrize("url", ["https://x/a.png", "http://x/a.png", "data:image/png;base64,AA"])
def test_an_http_or_data_image_url_is_taken(url: str) -> None:
    image = {"type": "image_url", "image_url": {"url": url}}
    [item] = decode(messages=[{"role": "user", "content": [image]}]).command.input
    assert item["content"][0]["image_url"] == url


@pytest.mark.parametrize("file", [{}, {"filename": "a.txt"}])
def test_a_file_part_without_its_data_or_id_is_refused(file: dict[str, Any]) -> None:
    """A ``file`` part that holds no file sends nothing an upstream could read."""
    error = refused(messages=[{"role": "user", "content": [{"type": "file", "file": file}]}])
    param = "messages[0].content[0].file.file_data"
    assert (error.status, error.param, error.code) == (400, param, "missing_required_parameter")
    assert "'file_id'" in error.message


@pytest.mark.parametrize(
    "content", ["", [{"type": "text", "text": ""}], [{"type": "text", "text": ""}] * 2]
)
def test_an_empty_user_message_is_a_turn_with_one_empty_text_part(content: Any) -> None:
    """Hosted answers an empty user message: it is kept, not left out (which left a
    Responses upstream an empty input, an Anthropic upstream no message)."""
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": content},
    ]
    items = decode(messages=messages).command.input
    assert [i.get("role") for i in items] == ["system", "user", "assistant", "user"]
    assert items[-1]["content"] == [{"type": "input_text", "text": ""}]
    [alone] = decode(messages=[{"role": "user", "content": content}]).command.input
    assert alone["content"] == [{"type": "input_text", "text": ""}]


def test_settings_are_mapped() -> None:
    decoded = decode(
        stream=True,
        stream_options={"include_usage": True},
        tools=[{"type": "function", "function": {"name": "f", "description": "d", "strict": True}}],
        tool_choice={"type": "function", "function": {"name": "f"}},
        parallel_tool_calls=False,
        max_tokens=10,
        max_completion_tokens=20,
        stop="END",
        temperature=1,
        top_p=0.5,
        top_k=40,
        n=1,
        seed=7,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "s", "description": "a reply", "schema": {}, "strict": True},
        },
        reasoning_effort="high",
        verbosity="low",
        prompt_cache_key="chain-1",
        user="u",
        metadata={"k": "v"},
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        store=True,
        chat_template_kwargs={"enable_thinking": False},
    )
    command = decoded.command
    settings = command.settings
    assert decoded.include_usage
    assert (command.store, command.stream, command.hidden_rounds) == (False, True, True)
    assert settings.tools == [
        {
            "type": "function",
            "name": "f",
            "parameters": {"type": "object", "properties": {}},
            "description": "d",
            "strict": True,
        }
    ]
    assert settings.tool_choice == {"type": "function", "name": "f"}
    assert settings.parallel_tool_calls is False
    assert settings.max_output_tokens == 20
    assert settings.stop_sequences == ["END"]
    assert (settings.temperature, settings.top_p, settings.top_k, settings.seed) == (1, 0.5, 40, 7)
    assert settings.text_format == {
        "type": "json_schema",
        "name": "s",
        "schema": {},
        "description": "a reply",
        "strict": True,
    }
    assert (settings.verbosity, settings.prompt_cache_key) == ("low", "chain-1")
    assert (settings.reasoning_effort, settings.user, settings.metadata) == (
        "high",
        "u",
        {"k": "v"},
    )
    assert (settings.presence_penalty, settings.frequency_penalty) == (0.5, -0.5)


def test_a_tool_without_strict_is_not_strict() -> None:
    """Chat's function tools are non-strict unless ``strict: true``; the Responses API
    (the canonical form) makes a tool without ``strict`` strict, its schema normalized
    (every property required), so the decoded tool says ``strict: false``."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    [decoded] = decode(tools=[tool]).command.settings.tools
    assert decoded["strict"] is False


CUSTOM_TOOL: dict[str, Any] = {
    "type": "custom",
    "custom": {
        "name": "apply_patch",
        "description": "Patch",
        "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: x"}},
    },
}


def test_a_custom_tool_and_its_choice_are_their_responses_forms() -> None:
    text = {"type": "custom", "custom": {"name": "note", "format": {"type": "text"}}}
    command = decode(
        tools=[CUSTOM_TOOL, text], tool_choice={"type": "custom", "custom": {"name": "note"}}
    ).command
    assert command.settings.tools == [
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
        },
        {"type": "custom", "name": "note", "format": {"type": "text"}},
    ]
    assert command.settings.tool_choice == {"type": "custom", "name": "note"}


def test_an_allowed_tools_choice_is_its_responses_form() -> None:
    function = {"type": "function", "function": {"name": "f"}}
    allowed = {
        "mode": "required",
        "tools": [{"type": "custom", "custom": {"name": "note"}}, {"type": "function", **function}],
    }
    text = {"type": "custom", "custom": {"name": "note"}}
    choice = {"type": "allowed_tools", "allowed_tools": allowed}
    command = decode(tools=[function, text], tool_choice=choice).command
    assert command.settings.tool_choice == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "custom", "name": "note"}, {"type": "function", "name": "f"}],
    }


def test_a_custom_call_and_its_answer_are_custom_items() -> None:
    call = {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "raw"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    items = decode(messages=messages, tools=[CUSTOM_TOOL]).command.input
    assert [{k: v for k, v in item.items() if k != "id"} for item in items[1:]] == [
        {
            "type": "custom_tool_call",
            "call_id": "c1",
            "name": "apply_patch",
            "input": "raw",
            "status": "completed",
        },
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
    ]


def test_defaults() -> None:
    decoded = decode()
    settings = decoded.command.settings
    assert not decoded.include_usage
    assert decoded.command.stream is False
    assert (settings.tool_choice, settings.parallel_tool_calls) == ("auto", True)
    assert settings.text_format == {"type": "text"}
    assert decode(response_format={"type": "text"}).command.settings.text_format == {"type": "text"}
    assert decode(modalities=["text"]).command.settings.text_format == {"type": "text"}
    assert decode(response_format={"type": "json_object"}).command.settings.text_format == {
        "type": "json_object"
    }
    assert decode(stop=["a", "b"]).command.settings.stop_sequences == ["a", "b"]


def test_logprobs_are_the_text_logprobs_include() -> None:
    settings = decode(logprobs=True, top_logprobs=2).command.settings
    assert (settings.include, settings.top_logprobs) == (["message.output_text.logprobs"], 2)
    settings = decode(logprobs=False).command.settings
    assert (settings.include, settings.top_logprobs) == ([], None)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"n": 2}, "n", "unsupported_value"),
        ({"top_logprobs": 3}, "top_logprobs", "invalid_value"),
        ({"logprobs": False, "top_logprobs": 3}, "top_logprobs", "invalid_value"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "integer_above_max_value"),
        ({"modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
        ({"modalities": ["audio"]}, "modalities", "unsupported_value"),
        ({"audio": {"voice": "x"}}, "audio", "unsupported_parameter"),
        ({"functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
        ({"logit_bias": {"1": 2}}, "logit_bias", "unsupported_parameter"),
        ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
        (
            {"web_search_options": {"search_context_size": "huge"}},
            "web_search_options.search_context_size",
            "invalid_value",
        ),
        ({"messages": []}, "messages", "empty_array"),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content", "empty_array"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": []}]},
            "messages[1].content",
            "empty_array",
        ),
        ({"messages": "hi"}, "messages", "invalid_type"),
        (
            {"moderation": {"model": "m", "policy": {"input": {"mode": "redact"}}}},
            "moderation.policy.input.mode",
            "invalid_value",
        ),
        ({"temperature": "warm"}, "temperature", "invalid_type"),
        (
            {"stream": True, "stream_options": {"include_obfuscation": "no"}},
            "stream_options.include_obfuscation",
            "invalid_type",
        ),
        ({"temperature": 3}, "temperature", "decimal_above_max_value"),
        ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "x": 1}]}]},
            "messages[0].content[0].type",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].image_url.url",
            "missing_required_parameter",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
                ]
            },
            "messages[0].content[0].type",
            "unsupported_content_type",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "c9", "content": "x"}]},
            "messages[0].tool_call_id",
            "tool_call_not_found",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, ASSISTANT_CALLS]},
            "messages[1].role",
            "tool_output_missing",
        ),
        (
            {
                "messages": [
                    ASSISTANT_CALLS,
                    {"role": "tool", "tool_call_id": "c1", "content": "x"},
                    ASSISTANT_CALLS,
                ]
            },
            "messages[2].tool_calls[0].id",
            "duplicate_call_id",
        ),
        (
            {"tools": [{"type": "shell", "custom": {"name": "g"}}]},
            "tools[0].type",
            "invalid_value",
        ),
        (
            {"tools": [{"type": "custom", "custom": {"name": "g", "format": {"type": "x"}}}]},
            "tools[0].custom.format.type",
            "invalid_value",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "g"}}],
                "tool_choice": {"type": "custom", "custom": {"name": "g"}},
            },
            "tool_choice.custom.name",
            "invalid_value",
        ),
        (
            {"tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
            "missing_required_parameter",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}] * 2},
            "tools[1].function.name",
            "invalid_value",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {
                    "type": "allowed_tools",
                    "allowed_tools": {
                        "mode": "auto",
                        "tools": [
                            {"type": "function", "function": {"name": "f"}},
                            {"type": "function", "function": {"name": "nope"}},
                        ],
                    },
                },
            },
            "tool_choice.allowed_tools.tools[1].function.name",
            "invalid_value",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"tools": []}},
            },
            "tool_choice.allowed_tools.mode",
            "missing_required_parameter",
        ),
        (  # an object is judged as the named choice, not as one of the strings
            {"tool_choice": {"type": "function"}},
            "tool_choice.function",
            "missing_required_parameter",
        ),
        (
            {"tool_choice": {"type": "function", "function": {"name": 3}}},
            "tool_choice.function.name",
            "invalid_type",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "nope"}},
            },
            "tool_choice.function.name",
            "invalid_value",
        ),
        ({"tool_choice": "auto"}, "tool_choice", "invalid_value"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "f"}}},
            "tool_choice",
            "invalid_value",
        ),
        (
            {"response_format": {"type": "json_schema"}},
            "response_format.json_schema",
            "missing_required_parameter",
        ),
        ({"metadata": {"k": 1}}, "metadata.k", "invalid_type"),
        (
            {"metadata": {f"k{n}": "v" for n in range(17)}},
            "metadata",
            "object_above_max_properties",
        ),
    ],
)
def test_refused_with_a_400_naming_the_field(
    fields: dict[str, Any], param: str, code: str | None
) -> None:
    error = refused(**fields)
    assert (error.status, error.param, error.code) == (400, param, code), error.message
    # A value none of a field's values is worded as hosted words it, the field unnamed.
    assert param in error.message or error.message.startswith("Invalid value: '")


@pytest.mark.parametrize(
    ("message", "param", "words"),
    [
        (
            {"role": "robot", "content": "x"},
            "messages[0].role",
            "Invalid value: 'robot'. Supported values are: 'system', 'developer', 'user', "
            "'assistant', and 'tool'.",
        ),
        (
            {"role": "user", "content": [{"type": "video", "x": 1}]},
            "messages[0].content[0].type",
            "Invalid value: 'video'. Supported values are: 'text', 'image_url', 'file', and "
            "'input_audio'.",
        ),
    ],
)
def test_an_unknown_role_or_part_type_is_refused_in_hosted_words(
    message: dict[str, Any], param: str, words: str
) -> None:
    """As hosted words a value none of a field's values (not pydantic's "Input tag ...")."""
    error = refused(messages=[message])
    assert (error.param, error.code, error.message) == (param, "invalid_value", words)


@pytest.mark.parametrize(
    ("tool", "code", "words"),
    [
        (
            {"type": "web_search"},
            "invalid_value",
            "Invalid value: 'web_search'. Supported values are: 'function' and 'custom'.",
        ),
        ({"function": {"name": "f"}}, "missing_required_parameter", None),
    ],
)
def test_a_tool_of_an_unknown_type_is_refused_naming_both_types(
    tool: dict[str, Any], code: str, words: str | None
) -> None:
    """A tool is a function or a custom tool: the error names both, as hosted lists them,
    not the first alternative alone."""
    error = refused(tools=[tool])
    assert (error.param, error.code) == ("tools[0].type", code), error.message
    if words is not None:
        assert error.message == words


def test_a_legacy_function_message_says_what_to_send_instead() -> None:
    """Hosted still takes ``role: "function"`` (the ``functions`` API's answer); a
    translated request cannot carry it, and the 400 says why and what to send."""
    error = refused(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "function", "name": "lookup", "content": "42"},
        ]
    )
    assert (error.param, error.code) == ("messages[1].role", "unsupported_value")
    assert error.message == (
        "Unsupported value: 'messages[1].role' is 'function', a message of the legacy "
        "functions API, which this gateway does not carry when the request is translated "
        "for its upstream; send tool calls and 'tool' messages instead."
    )


@pytest.mark.parametrize("stream", [None, False])
def test_stream_options_without_a_stream_are_refused_as_hosted_refuses_them(
    stream: bool | None,
) -> None:
    error = refused(stream=stream, stream_options={"include_usage": True})
    assert error.to_dict() == {
        "message": "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        "type": "invalid_request_error",
        "param": "stream_options",
        "code": None,
    }
    assert decode(stream=stream, stream_options=None).command.stream is False
    assert decode(stream=True, stream_options={"include_usage": True}).include_usage


def test_prompt_cache_settings_go_where_the_upstream_has_them() -> None:
    """Fields of the Responses API too: settings for Chat and Responses upstreams."""
    decoded = decode(prompt_cache_retention="24h", prompt_cache_options={"ttl": "30m"})
    settings = decoded.command.settings
    assert (settings.prompt_cache_retention, settings.prompt_cache_options) == (
        "24h",
        {"ttl": "30m"},
    )
    assert settings.vendor_fields == {}


def test_a_parts_prompt_cache_breakpoint_stays_with_its_part() -> None:
    """On a system, developer or user message's text, an image and a file; a tool
    message's text parts are one text, with the last breakpoint among them. An assistant
    message's text has none: the Responses API has no breakpoint on output text."""
    mark, hour = {"mode": "explicit"}, {"mode": "explicit", "ttl": "12h"}

    def text(said: str, marked: dict[str, Any] | None = mark) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "text", "text": said}
        return part if marked is None else {**part, "prompt_cache_breakpoint": marked}

    image = {"type": "image_url", "image_url": {"url": "https://x/i.png"}}
    file = {"type": "file", "file": {"file_data": "data:text/plain;base64,aGk="}}
    user_parts = [
        text("u"),
        {**image, "prompt_cache_breakpoint": mark},
        {**file, "prompt_cache_breakpoint": hour},
        text("plain", None),
    ]
    messages = [
        {"role": "system", "content": [text("s")]},
        {"role": "developer", "content": [text("d")]},
        {"role": "user", "content": user_parts},
        {**ASSISTANT_CALLS, "content": [text("a")]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [text("1"), text("2", hour), text("3", None)],
        },
    ]
    system, developer, user, said, _, output = decode(messages=messages).command.input
    assert system["content"] == [
        {"type": "input_text", "text": "s", "prompt_cache_breakpoint": mark}
    ]
    assert developer["content"][0]["prompt_cache_breakpoint"] == mark
    assert [part.get("prompt_cache_breakpoint") for part in user["content"]] == [
        mark,
        mark,
        hour,
        None,
    ]
    assert said["content"] == [{"type": "output_text", "text": "a"}]
    assert output["output"] == [
        {"type": "input_text", "text": "123", "prompt_cache_breakpoint": hour}
    ]
    unmarked = [*messages[:4], {**messages[4], "content": [text("x", None)]}]
    assert decode(messages=unmarked).command.input[-1]["output"] == "x"  # a string, as before


@pytest.mark.parametrize("side", ["input", "output"])
def test_a_moderation_policy_that_blocks_is_refused(side: str) -> None:
    """The gateway cannot moderate: ignoring the policy would let through what it blocks."""
    policy = {side: {"mode": "block"}, "input" if side == "output" else "output": None}
    error = refused(moderation={"model": "omni-moderation-latest", "policy": policy})
    param = f"moderation.policy.{side}.mode"
    assert (error.status, error.param, error.code) == (400, param, "unsupported_value")
    assert "block" in error.message


@pytest.mark.parametrize(
    "moderation",
    [
        {"model": "omni-moderation-latest"},
        {"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}},
        {"model": "m", "policy": {"input": {"mode": "score"}, "output": {"mode": "score"}}},
    ],
)
def test_moderation_scores_alone_are_ignored(moderation: dict[str, Any]) -> None:
    """Scores change nothing generated: the answer has no moderation object to show them."""
    assert decode(moderation=moderation).command.settings.vendor_fields == {}


@pytest.mark.parametrize("tier", ["auto", "default", "flex", "scale", "priority", "fast", None])
def test_a_service_tier_of_the_api_is_kept(tier: str | None) -> None:
    assert decode(service_tier=tier).command.settings.service_tier == tier


@pytest.mark.parametrize("tier", ["turbo", "Default", "", "ultrafast"])
def test_a_service_tier_the_api_has_not_is_a_400_naming_it(tier: str) -> None:
    """As hosted (``ultrafast`` is the Responses API's only): the value named, with the
    values there are."""
    error = refused(service_tier=tier)
    assert (error.status, error.param, error.code) == (400, "service_tier", "invalid_value")
    assert error.message == (
        f"Invalid value: '{tier}'. Supported values are: 'auto', 'default', 'fast', 'flex', "
        "'priority', and 'scale'."
    )


def _schema_named(name: str) -> dict[str, Any]:
    schema = {"name": name, "schema": {"type": "object"}}
    return {"type": "json_schema", "json_schema": schema}


@pytest.mark.parametrize("name", ["a", "Reply_v2-final", "x" * 64])
def test_a_schema_name_the_api_takes_is_kept(name: str) -> None:
    text_format = decode(response_format=_schema_named(name)).command.settings.text_format
    assert text_format["name"] == name


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("reply.v2", "invalid_value", "string does not match pattern. Expected a string that "),
        ("a b", "invalid_value", "matches the pattern '^[a-zA-Z0-9_-]+$'."),
        ("x" * 65, "string_above_max_length", "length 64, but got a string with length 65 "),
    ],
)
def test_a_schema_name_the_api_refuses_is_a_400(name: str, code: str, words: str) -> None:
    """As on the Responses API (``text.format.name``), whatever the upstream."""
    error = refused(response_format=_schema_named(name))
    param = "response_format.json_schema.name"
    assert (error.status, error.param, error.code) == (400, param, code)
    assert error.message.startswith(f"Invalid '{param}': ")
    assert words in error.message


def test_a_safety_identifier_is_limited_as_hosted_limits_it() -> None:
    """At most 128 characters, as on the Responses API."""
    error = refused(safety_identifier="u" * 129)
    assert (error.status, error.param, error.code) == (
        400,
        "safety_identifier",
        "string_above_max_length",
    )
    assert error.message == (
        "Invalid 'safety_identifier': string too long. Expected a string with maximum length "
        "128, but got a string with length 129 instead."
    )
    assert decode(safety_identifier="u" * 128).command.settings.safety_identifier == "u" * 128


def test_a_prompt_cache_retention_the_api_has_not_is_a_400_naming_it() -> None:
    """``in_memory`` or ``24h``, as on the Responses API."""
    error = refused(prompt_cache_retention="1y")
    assert (error.status, error.param, error.code) == (
        400,
        "prompt_cache_retention",
        "invalid_value",
    )
    settings = decode(prompt_cache_retention="in_memory").command.settings
    assert settings.prompt_cache_retention == "in_memory"


def test_metadata_is_limited_as_hosted_limits_it() -> None:
    error = refused(metadata={"k": "v" * 513})
    assert (error.param, error.code) == ("metadata.k", "string_above_max_length")
    assert decode(metadata={"k": "v" * 512}).command.settings.metadata == {"k": "v" * 512}


def test_empty_refused_parameters_ask_for_nothing() -> None:
    """An empty ``logit_bias`` or ``functions`` is what clients send for none."""
    decode(logit_bias={}, functions=[])


def test_a_tool_call_is_answered_once() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    assert refused(messages=messages).param == "messages[3].tool_call_id"


def test_too_many_messages_are_refused_before_validation() -> None:
    error = refused(messages=[{"role": "user", "content": "x"}] * 21)
    assert (error.param, error.code) == ("messages", "array_above_max_length")


def test_deep_nesting_is_refused() -> None:
    deep: Any = {}
    for _ in range(200):
        deep = {"a": deep}
    with pytest.raises(InvalidRequest) as caught:
        decode_chat(orjson.loads(orjson.dumps({"model": "m", "messages": [], "x": deep})))
    assert (caught.value.param, caught.value.code) == ("x", "nesting_too_deep")


def test_web_search_options_ask_for_the_gateways_web_search() -> None:
    location = {"type": "approximate", "approximate": {"city": "Oslo"}}
    options = {"search_context_size": "low", "user_location": location}
    tool = {"type": "function", "function": {"name": "f"}}
    decoded = decode(web_search_options=options, tools=[tool])
    assert decoded.command.settings.tools[-1] == {
        "type": "web_search",
        "search_context_size": "low",
        "user_location": location,
    }
    assert decode(web_search_options={}).command.settings.tools == [{"type": "web_search"}]


def test_a_named_choice_beside_web_search_options_is_judged_among_the_tools() -> None:
    """The web search the options add has no name: the choice is judged among the tools
    of its own type (once a ``KeyError``, a 500)."""
    tool = {"type": "function", "function": {"name": "f"}}
    choice = {"type": "function", "function": {"name": "f"}}
    decoded = decode(web_search_options={}, tools=[tool], tool_choice=choice)
    assert decoded.command.settings.tool_choice == {"type": "function", "name": "f"}


def test_fields_the_gateway_does_not_model_are_kept_for_a_chat_upstream() -> None:
    fields = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "store": True,
        "logit_bias": {},
        "top_k": 3,
        "chat_template_kwargs": {"enable_thinking": False},
        "repetition_penalty": 1.1,
    }
    settings = decode_chat(fields).command.settings
    assert settings.vendor_fields == {
        "chat_template_kwargs": {"enable_thinking": False},
        "repetition_penalty": 1.1,
    }
    assert settings.top_k == 3


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            {"tool_choice": "required"},
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
        ),
        (
            {"tool_choice": "auto", "parallel_tool_calls": False},
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
        ),
    ],
)
def test_refused_in_hosted_words(fields: dict[str, Any], words: str) -> None:
    """As hosted OpenAI refuses each (its words, found in its users' reports)."""
    assert refused(**fields).message == words


def test_what_hosted_takes_is_taken() -> None:
    """Four stop strings, 128 tools, a 128-character name of ``[a-zA-Z0-9_-]``, and
    ``tool_choice: "none"`` (which asks for no tool) without tools."""
    assert decode(stop=["a", "b", "c", "d"]).command.settings.stop_sequences == list("abcd")
    tools = [_function(f"f{n}") for n in range(127)] + [_function("A-z_9" + "x" * 123)]
    assert len(decode(tools=tools).command.settings.tools) == 128
    assert decode(tool_choice="none").command.settings.tool_choice == "none"
    searching = decode(web_search_options={}, parallel_tool_calls=False, tool_choice="auto")
    assert searching.command.settings.parallel_tool_calls is False  # the search is a tool


def test_what_vllm_and_llama_cpp_take_is_taken_though_hosted_refuses_it() -> None:
    """The fast path sends these to a Chat server untouched, and vLLM and llama.cpp
    answer them: a route that translates the request (gateway tools, another upstream
    API) takes them too, their meaning plain, rather than refuse what its server takes."""
    stops = [str(n) for n in range(6)]
    assert decode(stop=stops).command.settings.stop_sequences == stops
    assert decode(tools=[]).command.settings.tools == []
    many = [_function(f"f{n}") for n in range(130)]
    assert len(decode(tools=many).command.settings.tools) == 130
    dotted = decode(tools=[_function("files.read"), _function("mcp/search")])
    assert [tool["name"] for tool in dotted.command.settings.tools] == ["files.read", "mcp/search"]
    alone = decode(parallel_tool_calls=False)
    assert alone.command.settings.tools == []
    assert alone.command.settings.parallel_tool_calls is False
    named = decode(messages=[{"role": "user", "content": "q", "name": "Ann Lee"}])
    assert [item["role"] for item in named.command.input] == ["user"]


def test_tools_sent_empty_with_an_auto_choice_is_taken_as_vllm_takes_it() -> None:
    """vLLM refuses a ``tool_choice`` only without ``tools`` (absent or null), and
    llama.cpp takes ``auto`` always: ``tools: []`` with ``auto`` (a client's list of its
    tools, empty this turn) is answered there, on the fast path, so a translated route
    takes it too, as no tools."""
    decoded = decode(tools=[], tool_choice="auto")
    assert decoded.command.settings.tools == []
    assert decoded.command.settings.tool_choice == "auto"


@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "f"}}],
)
def test_tools_sent_empty_with_a_forcing_choice_is_refused(choice: Any) -> None:
    """A choice forcing a call of none of no tools has no plain meaning (vLLM refuses a
    named one; ``required`` it constrains to a call of no tool)."""
    assert refused(tools=[], tool_choice=choice).param == "tool_choice"


def test_a_function_name_over_128_characters_is_refused_as_hosted() -> None:
    error = refused(tools=[_function("a" * 129)])
    assert (error.param, error.code) == ("tools[0].function.name", "string_above_max_length")


@pytest.mark.parametrize(
    ("parameters", "key"),
    [
        ({"type": "string"}, "type"),
        ({"type": "object", "properties": {"a": "text"}}, "properties"),
        ({"type": "object", "required": "a"}, "required"),
    ],
)
def test_a_functions_parameters_are_an_object_schema_as_on_responses(
    parameters: dict[str, Any], key: str
) -> None:
    """As on the Responses API: the top level is an object schema, its ``properties``
    schemas and its ``required`` a list of names (hosted refuses a schema of another
    type too)."""
    error = refused(tools=[_function("f"), _function("g", parameters)])
    assert (error.param, error.code) == (
        f"tools[1].function.parameters.{key}",
        "invalid_function_parameters",
    )
    assert error.message.startswith("Invalid schema for 'tools[1].function.parameters': ")


def test_a_functions_object_schema_is_kept() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    [tool] = decode(tools=[_function("f", schema)]).command.settings.tools
    assert tool["parameters"] == schema


@pytest.mark.parametrize(
    ("fields", "param", "code", "words"),
    [
        (
            {"messages": [{"role": "user", "content": None}]},
            "messages[0].content",
            "invalid_type",
            "Invalid type for 'messages[0].content': expected one of a string or array of "
            "objects, but got null instead.",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "tool", "tool_call_id": "c", "content": {}},
                ]
            },
            "messages[1].content",
            "invalid_type",
            "Invalid type for 'messages[1].content': expected one of a string or array of "
            "objects, but got an object instead.",
        ),
        (
            {"stop": 5},
            "stop",
            "invalid_type",
            "Invalid type for 'stop': expected one of a string or array of strings, but got "
            "an integer instead.",
        ),
        (
            {"n": 0},
            "n",
            "integer_below_min_value",
            "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 instead.",
        ),
        (
            {"modalities": ["video"]},
            "modalities[0]",
            "invalid_value",
            "Invalid value: 'video'. Supported values are: 'text' and 'audio'.",
        ),
    ],
)
def test_a_field_of_the_wrong_shape_is_refused_as_hosted_refuses_it(
    fields: dict[str, Any], param: str, code: str, words: str
) -> None:
    error = refused(**fields)
    assert (error.param, error.code, error.message) == (param, code, words)


def test_a_message_name_hosted_takes_is_kept() -> None:
    messages = [{"role": "user", "content": "q", "name": "Ann_Lee-2"}]
    assert decode(messages=messages).command.input[0]["name"] == "Ann_Lee-2"


def test_an_assistant_message_with_an_empty_tool_calls_array_is_one_without_calls() -> None:
    """vLLM answers every message with ``tool_calls: []`` (hosted, with ``null``), and a
    client sends the message back as it came (the ``openai`` SDK's message object
    dumped): taken as none, as vLLM takes it, and as the fast path forwards it, though
    hosted refuses it."""
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "tool_calls": []},
        {"role": "user", "content": "q"},
    ]
    decoded = decode(messages=messages).command.input
    assert [item.get("type", "message") for item in decoded] == ["message"] * 3
    assert decoded[1]["role"] == "assistant"


def test_a_prompt_cache_key_is_limited_as_hosted_limits_it() -> None:
    """At most 64 characters, as on the Responses API."""
    error = refused(prompt_cache_key="k" * 65)
    assert (error.status, error.param, error.code) == (
        400,
        "prompt_cache_key",
        "string_above_max_length",
    )
    assert error.message == (
        "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length "
        "64, but got a string with length 65 instead."
    )
    assert decode(prompt_cache_key="k" * 64).command.settings.prompt_cache_key == "k" * 64


def test_a_response_format_type_the_api_has_not_is_refused_in_hosted_words() -> None:
    """Hosted: ``Invalid value: 'object'. Supported values are: 'json_object',
    'json_schema', and 'text'.`` on ``response_format.type``."""
    error = refused(response_format={"type": "object"})
    assert (error.param, error.code, error.message) == (
        "response_format.type",
        "invalid_value",
        "Invalid value: 'object'. Supported values are: 'json_object', 'json_schema', and 'text'.",
    )


def test_content_parts_past_ten_a_message_allowed_are_refused_on_the_fast_path_too() -> None:
    """Ten content parts for each message the gateway takes, counted as the fast path
    reads the body (a forwarded request is held to the same bounds)."""
    part = {"type": "text", "text": "a"}
    within = [{"role": "user", "content": [part] * 20}, {"role": "user", "content": "x"}]
    assert peek_chat(orjson.dumps({"model": "m", "messages": within}), max_input_items=2)
    past = [{"role": "user", "content": [part] * 21}]
    with pytest.raises(InvalidRequest) as caught:
        peek_chat(orjson.dumps({"model": "m", "messages": past}), max_input_items=2)
    assert (caught.value.param, caught.value.code) == ("messages", "array_above_max_length")
    assert caught.value.message == (
        "'messages' holds 21 content parts, more than the 20 this gateway takes (ten for "
        "each message)."
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "The request body is not valid JSON; expected a JSON object."),
        (b"[]", "The request body must be a JSON object."),
        (b'{"messages": []}', "Missing required parameter: 'model'."),
        (
            orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}] * 21}),
            "'messages' holds 21 messages and items, more than the 20 this gateway takes.",
        ),
    ],
    ids=["not-json", "not-an-object", "no-model", "too-many-messages"],
)
def test_a_refused_body_is_told_what_is_wrong_in_full(body: bytes, message: str) -> None:
    """The message is what a client's user reads: whole, not only its code."""
    with pytest.raises(InvalidRequest) as caught:
        peek_chat(body, max_input_items=20)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"top_logprobs": 2},
            "Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is set.",
        ),
        (
            {"modalities": ["text", "audio"]},
            "Invalid value for 'modalities': only 'text' output is supported.",
        ),
        (
            {"response_format": {"type": "json_schema"}},
            "Missing required parameter: 'response_format.json_schema'.",
        ),
        (
            {"audio": {"voice": "alloy", "format": "wav"}},
            "Unsupported parameter: 'audio' is not supported by this gateway when the "
            "request is translated for its upstream.",
        ),
    ],
    ids=["top-logprobs", "modalities", "json-schema", "audio"],
)
def test_a_refused_value_is_told_in_full(fields: dict[str, Any], message: str) -> None:
    assert refused(**fields).message == message
