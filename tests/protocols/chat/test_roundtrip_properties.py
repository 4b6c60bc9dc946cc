"""Property: a Chat Completions request decoded to canonical items and sent on by the Chat
backend (the translated path) arrives with every field the client sent that the upstream
can carry."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.chat_request import to_upstream
from stateway.backends.chat_system_messages import place_system_messages
from stateway.core.inference import InferenceRequest
from stateway.core.tools.catalog import Catalog
from stateway.protocols.chat.decode import decode_chat

_text = st.text(min_size=1, max_size=8)
_name = st.none() | st.sampled_from(["ann", "bob"])
_part = st.builds(lambda t: {"type": "text", "text": t}, _text) | st.builds(
    lambda url, detail: (
        {"type": "image_url", "image_url": {"url": url}}
        | ({} if detail is None else {"image_url": {"url": url, "detail": detail}})
    ),
    st.sampled_from(["https://x/i.png", "data:image/png;base64,AA=="]),
    st.none() | st.sampled_from(["auto", "low", "high"]),
)
_arguments = st.sampled_from(['{"a":1}', "{}", '{"q":"x y"}'])


def _named(message: dict[str, Any], name: str | None) -> dict[str, Any]:
    return message if name is None else {**message, "name": name}


@st.composite
def _conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append(_named({"role": "system", "content": draw(_text)}, draw(_name)))
    if draw(st.booleans()):
        messages.append({"role": "developer", "content": [{"type": "text", "text": draw(_text)}]})
    calls = 0
    for _ in range(draw(st.integers(1, 3))):
        content = draw(_text | st.lists(_part, min_size=1, max_size=3))
        messages.append(_named({"role": "user", "content": content}, draw(_name)))
        assistant: dict[str, Any] = {"role": "assistant", "content": draw(st.none() | _text)}
        if draw(st.booleans()):
            assistant["reasoning_content"] = draw(_text)
        ids = [f"call_{calls + i}" for i in range(draw(st.integers(0, 2)))]
        calls += len(ids)
        if ids:
            assistant["tool_calls"] = [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": "f", "arguments": draw(_arguments)},
                }
                for i in ids
            ]
        elif assistant["content"] is None:
            assistant["content"] = draw(_text)
        messages.append(_named(assistant, draw(_name)))
        messages += [{"role": "tool", "tool_call_id": i, "content": draw(_text)} for i in ids]
    messages.append({"role": "user", "content": draw(_text)})
    return messages


_tool = {
    "type": "function",
    "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
}
_settings = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "max_tokens": st.integers(1, 4096),
        "stop": st.lists(_text, min_size=1, max_size=2),
        "seed": st.integers(0, 2**31),
        "top_k": st.integers(1, 100),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
        "user": _text,
        "metadata": st.dictionaries(st.sampled_from(["a", "b"]), _text, max_size=2),
        "response_format": st.sampled_from(
            [
                {"type": "json_object"},
                {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
            ]
        ),
        "stream": st.booleans(),
    },
)
_with_tools = st.fixed_dictionaries(
    {"tools": st.just([_tool])},
    optional={
        "tool_choice": st.sampled_from(
            ["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]
        ),
        "parallel_tool_calls": st.booleans(),
    },
)


def _sent(body: dict[str, Any]) -> dict[str, Any]:
    decoded = decode_chat(body)
    command = decoded.command
    catalog = Catalog(command.settings.tools)
    request = InferenceRequest(
        model=command.model,
        instructions=None,
        items=command.input,
        settings=command.settings,
        stream=command.stream,
        tools=catalog.model_tools(),
        tool_choice=catalog.model_choice(command.settings.tool_choice),
    )
    return to_upstream(request)


def _message_view(message: dict[str, Any]) -> dict[str, Any]:
    """What a message says, whatever the form: roles as a Chat upstream takes them, text
    parts of non-user messages joined, an image's detail made explicit."""
    view: dict[str, Any] = {"role": "system" if message["role"] == "developer" else message["role"]}
    content = message.get("content")
    if isinstance(content, list) and message["role"] != "user":
        content = "".join(part["text"] for part in content)
    elif isinstance(content, list):
        content = [
            part
            if part["type"] == "text"
            else {"type": "image_url", "image_url": {"detail": "auto", **part["image_url"]}}
            for part in content
        ]
    elif isinstance(content, str) and message["role"] == "user":
        content = [{"type": "text", "text": content}]
    view["content"] = content
    for key in ("name", "tool_call_id", "tool_calls", "reasoning_content"):
        if message.get(key) is not None:
            view[key] = message[key]
    if not content and message["role"] == "assistant":
        view.pop("name", None)  # a name rides on the message's text: none, no name
        view["content"] = None
    return view


_DEFAULTS = {"tool_choice": "auto", "parallel_tool_calls": True}
"""What a request with tools means when it leaves these out (and is sent explicitly)."""


@settings(max_examples=150, deadline=None)
@given(_conversation(), _settings, st.none() | _with_tools)
def test_what_the_client_sent_reaches_a_chat_upstream(
    messages: list[dict[str, Any]], fields: dict[str, Any], tools: dict[str, Any] | None
) -> None:
    body = {"model": "m", "messages": messages, **fields, **(tools or {})}
    sent = _sent(body)
    assert sent["model"] == "m"
    # Leading system and developer messages join into one (backends/chat_system_messages.py).
    expected = place_system_messages([_message_view(m) for m in messages])
    assert [_message_view(m) for m in sent["messages"]] == expected
    for key in (
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "top_k",
        "presence_penalty",
        "frequency_penalty",
        "reasoning_effort",
        "user",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    ):
        assert sent.get(key) == body.get(key, _DEFAULTS.get(key) if tools else None), key
    assert "metadata" not in sent  # the stored object's: OpenAI refuses it unless it stores
    assert sent.get("stream", False) == body.get("stream", False)
