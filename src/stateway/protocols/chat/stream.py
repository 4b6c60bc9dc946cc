"""Canonical stream events -> ``chat.completion.chunk`` SSE frames, as OpenAI sends them.

Before the first chunk of the answer, one with ``delta.role``, opening it as OpenAI does:
``"content": ""`` and ``"refusal": null`` before text (or nothing), and
``"content": null`` before a refusal (with ``"refusal": ""``) or a tool call, so that the
SDK's accumulated message has ``content: null`` where the completion would (and, when the
request asked for ``logprobs``, ``"logprobs": {"content": [], "refusal": null}``, as
hosted opens them, so that a stream without text adds up to the completion's empty list).
Before reasoning, which hosted never streams, it opens with ``"content": null`` too: what
follows is not known yet (text then sets ``content``; an answer of nothing but reasoning
gets its ``"content": ""`` in the last chunk, beside its finish reason);
then one chunk per text delta
(``content``, with its tokens as ``logprobs`` when the request asked for them), refusal
delta (``refusal``),
reasoning delta (``reasoning_content`` and ``reasoning``:
:func:`.encode.reasoning_fields`), client function
call start (``tool_calls[].id``, ``type``, ``function.name``, numbered by ``index`` in the
order the calls start) and arguments delta (``tool_calls[].function.arguments``), a custom
tool's as OpenAI streams one (``type: "custom"``, ``custom.name``, then ``custom.input``:
its whole input, which the gateway has only once the call is done); at the
end a chunk with the ``finish_reason`` and an empty delta (or, after an answer that cites
the gateway's web search, the message's ``annotations``, all of them, as hosted search
models send them and as the SDK's stream helper adds them up:
:func:`.encode.message_annotations`), a usage chunk (``choices: []``)
when the client asked for ``stream_options.include_usage`` (every other chunk then carries
``"usage": null``), and ``data: [DONE]``. A response that failed after it began ends with
one ``data: {"error": {...}}`` line instead (what the ``openai`` SDK raises as an error),
and no ``[DONE]`` (the error line alone when nothing was shown before: its status line
went out while the upstream was silent). The gateway's own tool items and events are not shown
(:mod:`stateway.core.hidden`).

The first text (or reasoning) of an item after an earlier item's starts with a blank line,
as :mod:`.encode` joins them; an empty text delta (without tokens) shows nothing, as an
empty text is no text in the completion.

Every chunk of a response shares its envelope (``id``, ``created``, ``model`` and, as in
the completion, ``"system_fingerprint": null``), so only the delta is serialized per chunk.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Final

import orjson

from stateway.core import events as ev
from stateway.core import logprobs
from stateway.core.errors import GatewayError, rate_limit_type
from stateway.core.items import CUSTOM_TOOL_CALL, FUNCTION_CALL, ITEM_BREAK
from stateway.core.response import ResponseState
from stateway.core.usage import Usage
from stateway.protocols.chat.encode import (
    completion_id,
    encode_usage,
    finish_reason,
    message_annotations,
    reasoning_fields,
)
from stateway.protocols.chat.errors import chat_error
from stateway.protocols.service_tier import served_tier

DONE: Final = b"data: [DONE]\n\n"
_FAILED: Final = frozenset({"failed", "cancelled"})
_OPENING: Final = {"role": "assistant", "content": "", "refusal": None}
_OPENING_REFUSAL: Final = {"role": "assistant", "content": None, "refusal": ""}
_OPENING_CALL: Final = {"role": "assistant", "content": None, "refusal": None}
_CALL_SHAPES: Final = {
    FUNCTION_CALL: ("function", "arguments"),
    CUSTOM_TOOL_CALL: ("custom", "input"),
}
"""A client's call item type -> its ``tool_calls`` entry's ``type`` and what its body's
streamed part is named."""
_NO_TOKENS: Final = b'{"content":[],"refusal":null}'
"""The role chunk's ``logprobs`` when they are asked for, as hosted opens them: a stream
that shows no text adds up to the completion's empty list, not to ``null``."""


class ChatStream:
    __slots__ = (
        "_calls",
        "_close",
        "_envelope",
        "_include_usage",
        "_open",
        "_opened",
        "_reasoning_at",
        "_tail",
        "_text_at",
        "_tokens",
        "_untold",
    )

    def __init__(self, include_usage: bool) -> None:
        self._include_usage = include_usage
        self._envelope = b""
        self._open = b""
        self._tail = b',"finish_reason":null}]' + (
            b',"usage":null}\n\n' if include_usage else b"}\n\n"
        )
        """What follows a delta chunk's ``logprobs``."""
        self._close = b',"logprobs":null' + self._tail
        self._calls: dict[int, int] = {}
        """Output index -> ``tool_calls`` index, for the client's function calls."""
        self._text_at = -1
        self._reasoning_at = -1
        """The output index of the item whose text (reasoning) was sent last; -1: none yet."""
        self._tokens = False
        """Whether the request asked for ``logprobs``: each text chunk then has them."""
        self._opened = False
        """Whether the chunk with ``delta.role`` was sent."""
        self._untold = False
        """Whether the answer opened on reasoning with ``"content": null`` and no text,
        refusal or call followed yet: it ends with ``"content": ""`` if none does."""

    def encode(self, event: ev.Event) -> bytes:
        """The frames of one canonical event (often none), after the opening chunk when
        they are the answer's first (but for a failure's error line: nothing was
        answered)."""
        frames = self._encode(event)
        if not frames or _failed(event):
            return frames
        if self._opened:
            if self._untold and not isinstance(event, ev.ReasoningDelta | ev.ResponseFinished):
                self._untold = False  # text, a refusal or a call: the content is told
            return frames
        self._opened = True
        self._untold = isinstance(event, ev.ReasoningDelta)
        return self._delta(_opening(event), _NO_TOKENS if self._tokens else None) + frames

    def _encode(self, event: ev.Event) -> bytes:
        match event:
            case ev.TextDelta(output_index=at, delta=delta, logprobs=tokens):
                if not (delta or tokens):  # shows nothing (nor opens the answer as text)
                    return b""
                if at != self._text_at and delta:
                    delta = delta if self._text_at < 0 else ITEM_BREAK + delta
                    self._text_at = at
                if not self._tokens:
                    return self._delta({"content": delta})
                chosen = orjson.dumps({"content": tokens or [], "refusal": None})
                return self._delta({"content": delta}, chosen)
            case ev.RefusalDelta(delta=delta):
                return self._delta({"refusal": delta})
            case ev.ReasoningDelta(output_index=at, delta=delta):
                if at != self._reasoning_at and delta:
                    delta = delta if self._reasoning_at < 0 else ITEM_BREAK + delta
                    self._reasoning_at = at
                return self._delta(reasoning_fields(delta))
            case ev.ArgumentsDelta(output_index=at, delta=delta):
                index = self._calls.get(at)
                if index is None:
                    return b""
                fragment = {"index": index, "function": {"arguments": delta}}
                return self._delta({"tool_calls": [fragment]})
            case ev.CustomInputDelta(output_index=at, delta=delta):
                index = self._calls.get(at)
                if index is None:
                    return b""
                return self._delta({"tool_calls": [{"index": index, "custom": {"input": delta}}]})
            case ev.ItemAdded(output_index=at, item=item) if item.get("type") in _CALL_SHAPES:
                kind, body = _CALL_SHAPES[item["type"]]
                index = self._calls[at] = len(self._calls)
                call = {
                    "index": index,
                    "id": item.get("call_id"),
                    "type": kind,
                    kind: {"name": item.get("name") or "", body: ""},
                }
                return self._delta({"tool_calls": [call]})
            case ev.ResponseCreated(response=state):
                self._start(state)
                return b""
            case ev.ResponseFinished(response=state):
                return self._finished(state)
            case _:
                return b""

    def _start(self, state: ResponseState) -> None:
        self._tokens = logprobs.wanted(state.settings)
        head = (
            b'data: {"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,'
            b'"service_tier":%s,"system_fingerprint":null'
        )
        self._envelope = head % (
            orjson.dumps(completion_id(state.id)),
            int(state.created_at),
            orjson.dumps(state.model),
            orjson.dumps(served_tier(state.settings.service_tier)),
        )
        self._open = self._envelope + b',"choices":[{"index":0,"delta":'

    def _delta(self, delta: dict[str, Any], tokens: bytes | None = None) -> bytes:
        """A chunk of ``delta``; with its ``tokens`` (``logprobs``) when given."""
        if tokens is None:
            return self._open + orjson.dumps(delta) + self._close
        return self._open + orjson.dumps(delta) + b',"logprobs":' + tokens + self._tail

    def _finished(self, state: ResponseState) -> bytes:
        if state.status in _FAILED:
            return b"data: " + orjson.dumps({"error": stream_error(state.error)}) + b"\n\n"
        reason = orjson.dumps(finish_reason(state))
        usage_null = b',"usage":null' if self._include_usage else b""
        cited = message_annotations(state.output)
        told: dict[str, Any] = {"content": ""} if self._untold else {}
        delta = orjson.dumps({**told, "annotations": cited} if cited else told)
        out = self._open + delta + b',"logprobs":null,"finish_reason":' + reason + b"}]"
        out += usage_null + b"}\n\n"
        if self._include_usage:
            usage = orjson.dumps(encode_usage(state.usage or Usage()))
            out += self._envelope + b',"choices":[],"usage":' + usage + b"}\n\n"
        return out + DONE


def _failed(event: ev.Event) -> bool:
    return isinstance(event, ev.ResponseFinished) and event.response.status in _FAILED


def _opening(first: ev.Event) -> dict[str, Any]:
    """The ``delta`` of the chunk with the role, given the answer's first event shown."""
    if isinstance(first, ev.RefusalDelta):
        return _OPENING_REFUSAL
    if isinstance(first, ev.ItemAdded | ev.ReasoningDelta):  # a client's call; reasoning,
        return _OPENING_CALL  # before a text, a refusal or a call (or nothing)
    return _OPENING


def stream_error(error: dict[str, Any] | None) -> dict[str, Any]:
    """A failed response's ``error`` in the OpenAI error shape, typed by its status as an
    answer would be (a rate limit ``requests`` or ``tokens``, a quota
    ``insufficient_quota``)."""
    error = error or {}
    status, code = error.get("status"), error.get("code")
    message = str(error.get("message") or "The response failed.")
    if not isinstance(status, int) or status >= 500:
        kind = "server_error"
    elif status == 429:
        kind = rate_limit_type(code, message)
    else:
        kind = "invalid_request_error"
    return {
        "message": message,
        "type": kind,
        "param": None,
        "code": code,
    }


def encode_error_chunk(error: GatewayError, sent: Container[str] | None = None) -> bytes:
    """The ``data: {"error": ...}`` line ending a stream the gateway cut off (an API key
    revoked while it streamed, an upstream failing part-way through a relay). ``sent``:
    a translated request's fields, its ``param`` named as sent (:func:`chat_error`)."""
    wire = error.to_dict() if sent is None else chat_error(error, sent)
    return b"data: " + orjson.dumps({"error": wire}) + b"\n\n"
