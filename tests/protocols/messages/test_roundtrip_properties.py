"""Property: a Messages request decoded to canonical items and sent on by the Anthropic
backend arrives with every field the client sent that the upstream can carry."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.anthropic_names import ToolNames
from stateway.backends.anthropic_request import AnthropicOptions, to_upstream
from stateway.core.inference import InferenceRequest
from stateway.core.tools.catalog import Catalog
from stateway.protocols.messages.decode import decode_messages

_text = st.text(min_size=1, max_size=8).filter(lambda text: not text.isspace())
"""Text Anthropic takes in a text block: neither empty nor blank (left out if sent)."""
_cache = st.sampled_from([None, {"type": "ephemeral"}])
_names = st.sampled_from(["f", "get_weather", "do-it"])
"""Tool names as declared (``_TOOL_NAMES``)."""


def _with_cache(block: dict[str, Any], cache: dict[str, Any] | None) -> dict[str, Any]:
    return block if cache is None else {**block, "cache_control": cache}


_text_block = st.builds(lambda t, c: _with_cache({"type": "text", "text": t}, c), _text, _cache)
_image = st.builds(
    lambda data, c: _with_cache(
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}, c
    ),
    st.sampled_from(["AA==", "iVBO"]),
    _cache,
) | st.just({"type": "image", "source": {"type": "url", "url": "https://x/i.png"}})
_document = st.sampled_from(
    [
        {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
        {
            "type": "document",
            "title": "t",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "hi"},
            "context": "notes",
            "citations": {"enabled": True},
        },
        {
            "type": "document",
            "title": "t",
            "source": {"type": "content", "content": [{"type": "text", "text": "a"}]},
            "citations": {"enabled": True},
        },
        {"type": "document", "source": {"type": "content", "content": "plain"}},
    ]
)
_user_blocks = st.lists(_text_block | _image | _document, min_size=1, max_size=3)
_thinking = st.builds(
    lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
    _text,
    st.text("ab=", min_size=1),
) | st.builds(lambda d: {"type": "redacted_thinking", "data": d}, st.text("xyz", min_size=1))
_input = st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9) | _text, max_size=2)


@st.composite
def _conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating turns; every tool_use answered at the start of the next user turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(_user_blocks)}]
    calls = 0
    for _ in range(draw(st.integers(0, 3))):
        blocks: list[dict[str, Any]] = draw(st.lists(_thinking, max_size=2))
        blocks += draw(st.lists(_text_block, max_size=1))
        uses = []
        for _ in range(draw(st.integers(0, 2))):
            calls += 1
            uses.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{calls}",
                    "name": draw(_names),
                    "input": draw(_input),
                }
            )
        if not blocks and not uses:
            blocks = [{"type": "text", "text": draw(_text)}]
        messages.append({"role": "assistant", "content": blocks + uses})
        results: list[dict[str, Any]] = []
        for use in uses:
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"]}
            content = draw(
                st.none() | _text | st.lists(_text_block | _image, min_size=1, max_size=2)
            )
            if content is not None:
                result["content"] = content
            if draw(st.booleans()):
                result["is_error"] = True
            results.append(_with_cache(result, draw(_cache)))
        rest = draw(st.lists(_text_block | _image, max_size=2)) if results else draw(_user_blocks)
        messages.append({"role": "user", "content": results + rest})
    return messages


_system = st.none() | _text | st.lists(_text_block, min_size=1, max_size=2)
_TOOL_NAMES = ("f", "get_weather", "do-it")
_choice = st.sampled_from(
    [None, {"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "f"}]
)


@settings(max_examples=200, deadline=None)
@given(
    _conversation(),
    _system,
    _choice,
    st.booleans(),
    st.lists(_text, max_size=2),
    st.none() | st.floats(0, 1),
    st.none() | st.integers(1, 50),
    st.none() | _text,
)
def test_messages_survive_the_canonical_round_trip(
    messages: list[dict[str, Any]],
    system: Any,
    choice: dict[str, Any] | None,
    serial: bool,
    stops: list[str],
    temperature: float | None,
    top_k: int | None,
    user: str | None,
) -> None:
    sent: dict[str, Any] = {"model": "m", "max_tokens": 512, "messages": messages}
    sent["tools"] = [{"name": n, "input_schema": {"type": "object"}} for n in _TOOL_NAMES]
    if system is not None:
        sent["system"] = system
    if choice is not None:
        parallel = (
            {"disable_parallel_tool_use": True} if serial and choice["type"] != "none" else {}
        )
        sent["tool_choice"] = {**choice, **parallel}
    if stops:
        sent["stop_sequences"] = stops
    if temperature is not None:
        sent["temperature"] = temperature
    if top_k is not None:
        sent["top_k"] = top_k
    if user is not None:
        sent["metadata"] = {"user_id": user}
    _at_most_four_marks(sent)  # what Anthropic takes (the backend caps a longer thread's)
    command = decode_messages(orjson.dumps(sent))
    catalog = Catalog(command.settings.tools)
    request = InferenceRequest(
        model="m",
        instructions=None,
        items=command.input,
        settings=command.settings,
        stream=False,
        tools=catalog.model_tools(),
        tool_choice=catalog.model_choice(command.settings.tool_choice),
    )
    upstream = to_upstream(request, AnthropicOptions(), ToolNames())
    assert _normal(upstream) == _normal(sent)


def _at_most_four_marks(body: dict[str, Any]) -> None:
    """Leave ``cache_control`` on the first four blocks that carry it (system first, then
    messages, a tool result's blocks after it) and take it off the rest."""
    left = 4
    system = body.get("system")
    blocks = list(system) if isinstance(system, list) else []
    for message in body["messages"]:
        if isinstance(message["content"], list):
            for block in message["content"]:
                blocks.append(block)
                if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                    blocks += block["content"]
    for block in blocks:
        if "cache_control" in block:
            if left:
                left -= 1
            else:
                del block["cache_control"]


def _normal(body: dict[str, Any]) -> dict[str, Any]:
    """Spellings that say the same thing made one: string content as a text block,
    ``tool_choice: auto`` as absent, an empty ``stop_sequences`` as absent."""
    out = {k: v for k, v in body.items() if v not in (None, [], {"type": "auto"})}
    if isinstance(out.get("system"), str):
        out["system"] = [{"type": "text", "text": out["system"]}]
    if out.get("tool_choice") == {"type": "auto"}:
        del out["tool_choice"]
    out["messages"] = [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if isinstance(m["content"], str)
        else m
        for m in out["messages"]
    ]
    return out
