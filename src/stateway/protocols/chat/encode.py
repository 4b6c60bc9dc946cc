"""Canonical -> Chat Completions wire: the ``chat.completion`` object, its usage and
finish reason.

The one choice's message shows what the client sees of a run (:mod:`stateway.core.hidden`):
the text of every assistant message as ``content`` (``null`` when there is none but a
refusal or tool calls, ``""`` when there is nothing at all), a
refusal as ``refusal``, the reasoning as both ``reasoning_content`` and ``reasoning``
(:func:`reasoning_fields`), and the
client's own function calls as ``tool_calls`` (a custom tool's as a ``custom`` one, its raw
``input``). The gateway's own tool calls are not shown;
the citations of its web search (``web_search_options``, or a backend's ``gateway_tools``)
are, as the message's ``annotations`` (:func:`message_annotations`: ``url_citation``,
indices into ``content``; :mod:`.stream` sends them with its last chunk, as hosted search
models do).
The texts of separate items (a run's rounds) are joined with a blank line between them
(:func:`~stateway.core.items.joined_items`), as :mod:`.stream` sends them.

``logprobs``, when the request asked for them, holds the tokens of that text (Chat's token
shape is the one the gateway keeps them in).

``finish_reason``: ``length`` when the output was cut at its token limit or the gateway's
tool rounds ran out, ``content_filter`` when filtered, ``tool_calls`` when the client has
calls to answer, else ``stop``.
"""

from __future__ import annotations

from typing import Any, Final

from stateway.core import logprobs
from stateway.core.hidden import client_calls
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    ITEM_BREAK,
    MESSAGE,
    REASONING,
    Item,
    item_text,
    joined_items,
)
from stateway.core.response import ResponseState
from stateway.core.usage import Usage
from stateway.protocols.service_tier import served_tier

_INCOMPLETE: Final = {"content_filter": "content_filter"}


def completion_id(response_id: str) -> str:
    return "chatcmpl-" + response_id.removeprefix("resp_")


def encode_completion(state: ResponseState) -> dict[str, Any]:
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    for item in state.output:
        kind = item.get("type")
        if kind == MESSAGE:
            parts: list[str] = []
            for part in item.get("content") or ():
                if part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
                elif isinstance(part.get("text"), str):
                    parts.append(part["text"])
            if parts:
                texts.append("".join(parts))
        elif kind == REASONING:
            reasoning.append(item_text(item))
    calls = client_calls(state.output)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": _content(texts, bool(refusals or calls)),
        "refusal": "".join(refusals) if refusals else None,
    }
    citations = message_annotations(state.output)
    if citations:
        message["annotations"] = citations
    if calls:
        message["tool_calls"] = [tool_call(call) for call in calls]
    if any(reasoning):
        message.update(reasoning_fields(joined_items(reasoning)))
    reason = finish_reason(state)
    choice = {"index": 0, "message": message, "logprobs": _logprobs(state), "finish_reason": reason}
    return {
        "id": completion_id(state.id),
        "object": "chat.completion",
        "created": int(state.created_at),
        "model": state.model,
        "choices": [choice],
        "usage": encode_usage(state.usage or Usage()),
        "service_tier": served_tier(state.settings.service_tier),
        "system_fingerprint": None,
    }


def reasoning_fields(text: str) -> dict[str, str]:
    """Reasoning ``text`` under both names Chat clients read it by: ``reasoning_content``
    (DeepSeek's, which llama.cpp and SGLang send and the AI SDK, OpenCode and LiteLLM
    read) and ``reasoning`` (what vLLM sends since it dropped the other, as OpenRouter
    does). A client reads one, whichever it knows."""
    return {"reasoning_content": text, "reasoning": text}


def _content(texts: list[str], other: bool) -> str | None:
    """The message's text; with none (empty texts are none), ``null`` beside a refusal or
    tool calls, else ``""`` (an answer of nothing, its output limit spent on reasoning
    say), as hosted and Chat servers answer, and as a stream adds up (:mod:`.stream`)."""
    joined = joined_items(texts)
    if joined:
        return joined
    return None if other else ""


def _logprobs(state: ResponseState) -> dict[str, Any] | None:
    """The answer's tokens (``choices[0].logprobs``) when the request asked for them: the
    tokens of its text parts, in Chat's shape, which is the one they are kept in."""
    if not logprobs.wanted(state.settings):
        return None
    tokens = [
        token
        for item in state.output
        if item.get("type") == MESSAGE
        for part in item.get("content") or ()
        for token in part.get("logprobs") or ()
    ]
    return {"content": tokens, "refusal": None}


def message_annotations(output: list[Item]) -> list[dict[str, Any]]:
    """The ``url_citation`` annotations of the gateway's web search on the messages of
    ``output`` (:func:`~stateway.core.tools.web_search.citations` made them), as Chat shows
    them: indices into ``content``, every message's text joined as :func:`_content` (and
    the stream) joins them."""
    found: list[dict[str, Any]] = []
    at = 0
    """Where the next message's text starts in ``content``."""
    for item in output:
        if item.get("type") != MESSAGE:
            continue
        length = 0
        for part in item.get("content") or ():
            if part.get("type") != "refusal" and isinstance(part.get("text"), str):
                found += _citations(part, at + length)
                length += len(part["text"])
        if length:  # an empty text is no text: joined without a break
            at += length + len(ITEM_BREAK)
    return found


def _citations(part: Item, offset: int) -> list[dict[str, Any]]:
    """A text part's ``url_citation`` annotations (the gateway's web search), as Chat shows
    them, their indices moved to where the part stands in ``content``."""
    return [
        {
            "type": "url_citation",
            "url_citation": {
                "start_index": annotation["start_index"] + offset,
                "end_index": annotation["end_index"] + offset,
                "url": annotation.get("url"),
                "title": annotation.get("title"),
            },
        }
        for annotation in part.get("annotations") or ()
        if isinstance(annotation, dict) and annotation.get("type") == "url_citation"
    ]


def tool_call(item: Item) -> dict[str, Any]:
    if item.get("type") == CUSTOM_TOOL_CALL:
        return {
            "id": item.get("call_id"),
            "type": "custom",
            "custom": {"name": item.get("name"), "input": item.get("input") or ""},
        }
    return {
        "id": item.get("call_id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
    }


def finish_reason(state: ResponseState) -> str:
    if state.status == "incomplete":
        return _INCOMPLETE.get(state.incomplete_reason or "", "length")
    if client_calls(state.output):
        return "tool_calls"
    return "stop"


def encode_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
