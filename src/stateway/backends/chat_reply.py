"""A Chat Completions reply (a ``chat.completion``, or a stream's ``chat.completion.chunk``)
read as canonical deltas: reasoning (``reasoning_content`` or ``reasoning``), text with its
tokens, a refusal, tool calls (a custom tool's too: :mod:`stateway.backends.chat_custom_calls`),
usage and the finish, in streaming order. A finish reason
saying the server gave up on the answer (vLLM's ``abort``, ``error``) is an
:class:`~stateway.core.errors.UpstreamError`. Field types an upstream got wrong are read
leniently (:mod:`stateway.backends.upstream_values`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from stateway.backends.chat_custom_calls import CustomInputs, custom_call, whole_arguments
from stateway.backends.chat_logprobs import chunk_tokens, text_tokens
from stateway.backends.chat_usage import from_chat_usage
from stateway.backends.upstream_values import count, obj, text
from stateway.core.errors import UpstreamError
from stateway.core.inference import (
    Delta,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item


def from_upstream_chunk(
    chunk: dict[str, Any], tokens: bool = False, custom: CustomInputs | None = None
) -> list[Delta]:
    """Deltas of one ``chat.completion.chunk``; its text's ``tokens`` (``logprobs``) are
    read only when asked for; its custom calls' fragments by the stream's ``custom``, which
    the finish closes (a chunk read alone, to see how a relayed stream ends, is read by a
    state of its own). A plain loop over a list: it runs for every chunk."""
    deltas: list[Delta] = []
    for choice in chunk.get("choices") or ():
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        given = choice.get("logprobs") if tokens else None
        if given or not _one_field(delta, deltas):
            tokens_given = chunk_tokens(given) if given else None
            inputs = CustomInputs() if custom is None else custom
            _message_deltas(obj(delta), _chunk_call_index, tokens_given, deltas, inputs)
        reason = text(choice.get("finish_reason"))
        if reason:
            if custom is not None:
                deltas += custom.closing()
            deltas.append(Finish(_ending(reason), _stop_sequence(choice)))
    usage = chunk.get("usage")
    if usage:
        deltas.append(UsageReport(from_chat_usage(obj(usage))))
    return deltas


_ONE_FIELD: dict[str, type[TextDelta] | type[ReasoningDelta]] = {
    "content": TextDelta,
    "reasoning_content": ReasoningDelta,
    "reasoning": ReasoningDelta,
}
"""What a streamed delta of one string field holds, for the fields that make one delta."""


def _one_field(delta: Any, deltas: list[Delta]) -> bool:
    """The common chunk's delta: one word of text or reasoning, its only field (no
    ``role``, no tokens). Its delta added, True; False for any other delta (read whole
    by :func:`_message_deltas`, which also reports the wrong types)."""
    if type(delta) is not dict or len(delta) != 1:
        return False
    [(field, value)] = delta.items()
    kind = _ONE_FIELD.get(field)
    if kind is None or type(value) is not str:
        return False
    if value:
        deltas.append(kind(value))
    return True


def _chunk_call_index(position: int, call: dict[str, Any]) -> int:
    """A streamed call fragment's own ``index`` (absent: the first call)."""
    return count(call.get("index", 0))


def from_upstream_completion(payload: dict[str, Any], tokens: bool = False) -> Iterator[Delta]:
    """Deltas of a whole ``chat.completion``, in streaming order (its text's ``tokens``
    read only when asked for)."""
    choices = payload.get("choices") or []
    if not choices:
        raise UpstreamError("The model server answered without a choice.")
    choice = choices[0]
    message = obj(choice.get("message"))
    given = choice.get("logprobs") if tokens else None
    deltas: list[Delta] = []
    _message_deltas(message, _position, text_tokens(given, message) if given else None, deltas)
    yield from deltas
    if payload.get("usage"):
        yield UsageReport(from_chat_usage(obj(payload["usage"])))
    yield Finish(_ending(text(choice.get("finish_reason")) or "stop"), _stop_sequence(choice))


GAVE_UP = frozenset({"abort", "error"})
"""Finish reasons of an answer the server cut short: vLLM's (and SGLang's) ``abort``, of a
request its engine aborted (a shutdown, a pause, a scale-down), which it still ends with
``[DONE]``; vLLM's engine's ``error``."""


def gave_up(reason: str) -> UpstreamError:
    """The error of an answer whose finish reason (one of :data:`GAVE_UP`) says the server
    gave up on it (the Chat fast path's too: :mod:`stateway.backends.upstream_relay`)."""
    return UpstreamError(f"The model server cut the answer short (finish_reason '{reason}').")


def _ending(reason: str) -> str:
    """``reason``, unless it says the server gave up on the answer: then the error."""
    if reason in GAVE_UP:
        raise gave_up(reason)
    return reason


def _stop_sequence(choice: dict[str, Any]) -> str | None:
    """The stop string that ended the choice, as vLLM (``stop_reason``) or SGLang
    (``matched_stop``) reports it: a token id or null when something else stopped it."""
    if choice.get("finish_reason") != "stop":
        return None
    matched = choice.get("stop_reason")
    if not isinstance(matched, str):
        matched = choice.get("matched_stop")
    return matched if isinstance(matched, str) else None


def _position(position: int, call: dict[str, Any]) -> int:
    """A whole message's call: its place among the message's calls."""
    return position


def _message_deltas(
    message: dict[str, Any],
    call_index: Callable[[int, dict[str, Any]], int],
    tokens: list[Item] | None,
    deltas: list[Delta],
    custom: CustomInputs | None = None,
) -> None:
    """Reasoning, text (with its ``tokens``), a refusal and tool calls of a message or a
    streamed delta (its custom calls' fragments read by the stream's ``custom``), in that
    order, added to ``deltas``."""
    reasoning = text(message.get("reasoning_content")) or text(message.get("reasoning"))
    if reasoning:
        deltas.append(ReasoningDelta(reasoning))
    content = text(message.get("content"))
    if content:
        deltas.append(TextDelta(content, tokens))
    elif tokens and not reasoning and not message.get("tool_calls"):
        deltas.append(TextDelta("", tokens))  # a token with no text yet (part of a character)
    refusal = message.get("refusal")  # OpenAI's; null from open model servers
    if refusal:
        deltas.append(RefusalDelta(text(refusal) or ""))
    for position, call in enumerate(message.get("tool_calls") or ()):
        given = custom_call(call)
        if given is not None:
            deltas.append(_custom(call_index(position, call), call, given, custom))
            continue
        function = obj(call.get("function"))
        deltas.append(
            ToolCallDelta(
                call_index(position, call),
                text(call.get("id")) or None,  # DashScope and DeepSeek repeat them as ""
                text(function.get("name")) or None,  # on a call's later fragments
                _arguments(function.get("arguments")),
            )
        )


def _arguments(value: Any) -> str:
    """A call's ``arguments``: a string, or an object (llama-server wrote them so for a
    while, ggml-org/llama.cpp#20198; TGI does) as its JSON."""
    if type(value) is dict:
        return orjson.dumps(value).decode()
    return text(value) or ""


def _custom(
    index: int, call: dict[str, Any], given: dict[str, Any], custom: CustomInputs | None
) -> ToolCallDelta:
    """A custom tool's call (its fragment, in a stream) as the offered function's."""
    call_id = text(call.get("id")) or None
    if custom is not None:
        return custom.piece(index, call_id, given)
    return ToolCallDelta(index, call_id, text(given.get("name")) or None, whole_arguments(given))
