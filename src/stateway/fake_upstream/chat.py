"""Chat Completions wire (``POST /v1/chat/completions``), as OpenAI and vLLM speak it.

Parses ``messages`` into a :class:`Conversation` and renders a :class:`Plan` as a
``chat.completion`` object or as ``chat.completion.chunk`` SSE frames ending in
``data: [DONE]``; ``stop`` strings end the text as vLLM ends it; ``[[think]]`` writes the
reasoning in the content between ``<think>`` tags (:func:`tagged`). With ``system_first`` it
refuses, as many open models' chat templates make vLLM do (400), a ``system`` or
``developer`` message anywhere but first; with ``reasoning_efforts``, a
``reasoning_effort`` outside them, as vLLM's request model refuses one (400: releases
before the OpenAI SDK's wider set take ``low``, ``medium`` and ``high`` only); with
``text_only``, a message holding an image, as vLLM refuses one for a model that takes none
(400, ``MODEL is not a multimodal model``); with ``content_required``, a message whose
``content`` is null or missing (an assistant message of tool calls alone, as the spec
sends it), as LM Studio refuses one (400, :data:`CONTENT_REQUIRED`). ``reasoning_field``
names the field the reasoning goes in, both ways: ``reasoning_content`` (the default) as
llama.cpp, SGLang and older vLLM write it, read back from an assistant message's
``reasoning_content`` or ``reasoning``; or ``reasoning``, as vLLM writes it since it
dropped ``reasoning_content`` (vllm-project/vllm#33402), reading back only ``reasoning``
(an assistant message's ``reasoning_content`` is left out of the model's view, as vLLM
leaves it). Its tools and ``tool_choice`` are taken as ``tool_server`` takes them
(:mod:`.chat_tools`); its calls are written as :mod:`.chat_calls` writes them
(``[[custom]]``, ``[[interleave]]``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import orjson

from stateway.fake_upstream.chat_calls import call_fragments, called
from stateway.fake_upstream.chat_tools import ToolServer, check_tools
from stateway.fake_upstream.conversation import Conversation, ConversationBuilder, content_text
from stateway.fake_upstream.delivery import END, PAYLOAD, STRUCT, Frame
from stateway.fake_upstream.errors import (
    UpstreamError,
    context_too_long,
    invalid_request,
    optional_positive_int,
    optional_top_logprobs,
    require_str,
)
from stateway.fake_upstream.plan import Plan, new_id, word_chunks, word_logprob

_DONE = b"data: [DONE]\n\n"
_OVERRUN = b"data: [DONE]\ndata: more\n\n"
"""``[DONE]`` going on with more data in its event (``[[overrun]]``)."""

ReasoningField = Literal["reasoning_content", "reasoning"]
REASONING_FIELDS: Final = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated Chat Completions request."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    conversation: Conversation
    top_logprobs: int | None = None
    """How many alternatives each token's logprobs list; None: ``logprobs`` not asked."""
    stop: tuple[str, ...] = ()
    """The ``stop`` strings, which end the text as vLLM ends it (:func:`stopped`)."""
    reasoning_field: ReasoningField = "reasoning_content"
    """The field the answer's reasoning is written in."""

    def body(self, plan: Plan) -> bytes:
        return orjson.dumps(completion(self, plan))

    def frames(self, plan: Plan) -> Iterator[Frame]:
        return completion_frames(self, plan)

    def context_error(self, window: int) -> UpstreamError:
        return context_too_long(self.conversation.prompt_tokens, window, "vllm")

    def error_frame(self, message: str, sequence: int, code: str | None = None) -> bytes:
        """A mid-stream error, as vLLM sends one: a data line holding only ``error``."""
        error = {"message": message, "type": "server_error", "param": None, "code": code}
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


SYSTEM_NOT_FIRST = "System message must be at the beginning."
"""The chat template error a strict template raises (Qwen's words), which vLLM answers
with a 400."""


CONTENT_REQUIRED = "Invalid 'content': 'content' field must be a string or an array of objects.."
"""LM Studio's refusal of a message whose content is null or missing: its words alone, the
body of its 400 (``{"error": WORDS}``) as reported in 2026, two full stops included
(lmstudio-ai/lmstudio-bug-tracker#261, nugget/thane-ai-agent#1229)."""


def parse_chat_request(
    body: dict[str, Any],
    *,
    system_first: bool = False,
    text_only: bool = False,
    content_required: bool = False,
    reasoning_efforts: tuple[str, ...] | None = None,
    reasoning_field: ReasoningField = "reasoning_content",
    tool_server: ToolServer = "openai",
) -> ChatRequest:
    model = require_str(body, "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("Missing required parameter: 'messages'.", "messages")
    builder = ConversationBuilder()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid_request(f"Invalid message at index {index}.", f"messages[{index}]")
        if system_first and index > 0 and message["role"] in ("system", "developer"):
            raise invalid_request(SYSTEM_NOT_FIRST, f"messages[{index}]")
        if content_required and message.get("content") is None:  # LM Studio's words alone
            raise UpstreamError(400, CONTENT_REQUIRED, fields=CONTENT_REQUIRED)
        if text_only and _has_image(message):  # vLLM's words and shape
            raise UpstreamError(
                400, f"{model} is not a multimodal model", type_="BadRequestError", code=400
            )
        _add_message(builder, message, _READ[reasoning_field])
    _check_continuation(body, messages)
    check_tools(body, tool_server)
    if reasoning_efforts is not None:
        _check_effort(body.get("reasoning_effort"), reasoning_efforts)
    options = body.get("stream_options")
    top_logprobs = optional_top_logprobs(body)
    if body.get("logprobs") is not True and body.get("top_logprobs") is not None:
        raise invalid_request("'logprobs' must be true when 'top_logprobs' is set.", "logprobs")
    return ChatRequest(
        model=model,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_tokens=optional_positive_int(body, "max_completion_tokens", "max_tokens"),
        conversation=builder.build(),
        top_logprobs=top_logprobs if body.get("logprobs") is True else None,
        stop=_stop(body.get("stop")),
        reasoning_field=reasoning_field,
    )


_READ: dict[ReasoningField, tuple[str, ...]] = {
    "reasoning_content": ("reasoning_content", "reasoning"),
    "reasoning": ("reasoning",),
}
"""The assistant message fields each ``reasoning_field`` reads reasoning back from."""


def _has_image(message: dict[str, Any]) -> bool:
    content = message.get("content")
    parts = content if isinstance(content, list) else ()
    return any(isinstance(part, dict) and part.get("type") == "image_url" for part in parts)


def _stop(given: Any) -> tuple[str, ...]:
    if isinstance(given, str):
        return (given,)
    if isinstance(given, list) and all(isinstance(s, str) for s in given):
        return tuple(given)
    if given is None:
        return ()
    raise invalid_request("'stop' must be a string or a list of strings.", "stop")


def tagged(plan: Plan) -> Plan:
    """``plan`` as a server without a reasoning parser answers it (``[[think]]``): the
    reasoning first in the content, between ``<think>`` tags, as the model wrote it."""
    if not (plan.think_tags and plan.reasoning):
        return plan
    thought = word_chunks(f"<think>\n{plan.reasoning_text}\n</think>\n\n")
    return replace(plan, reasoning=[], text=[*thought, *plan.text])


def stopped(request: ChatRequest, plan: Plan) -> tuple[Plan, str | None]:
    """``plan`` ended before the first ``stop`` string its text holds, and that string
    (what vLLM names as the choice's ``stop_reason``); the calls after it are not made."""
    content = plan.content
    found = [(content.find(s), s) for s in request.stop if s and s in content]
    if not found:
        return plan, None
    position, sequence = min(found)
    text = word_chunks(content[:position])
    return replace(plan, text=text, tool_calls=[], finish_reason="stop"), sequence


def _check_effort(effort: Any, accepted: tuple[str, ...]) -> None:
    """vLLM's refusal of an effort its request model does not list (null is no effort)."""
    if effort is None or effort in accepted:
        return
    quoted = [f"'{level}'" for level in accepted]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    raise invalid_request(f"reasoning_effort: Input should be {listed}", "reasoning_effort")


def _check_continuation(body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """vLLM's refusals of ``continue_final_message`` (continuing a prefilled assistant
    message): with ``add_generation_prompt`` (true by default), or after another role."""
    if body.get("continue_final_message") is not True:
        return
    if body.get("add_generation_prompt", True) is not False:
        raise invalid_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            "continue_final_message",
        )
    if messages[-1]["role"] != "assistant":
        raise invalid_request(
            "continue_final_message is set but the final message is not an assistant message.",
            "continue_final_message",
        )


def _add_message(
    builder: ConversationBuilder, message: dict[str, Any], reasoning_fields: tuple[str, ...]
) -> None:
    role: str = message["role"]
    text = content_text(message.get("content"))
    if role in ("tool", "function"):
        call_id = message.get("tool_call_id") or message.get("name") or ""
        builder.tool_result(str(call_id), text)
        return
    if role != "assistant":
        builder.message(role, text)
        return
    reasoning = next((message[f] for f in reasoning_fields if message.get(f)), None)
    if isinstance(reasoning, str):
        builder.reasoning(reasoning)
    calls = message.get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    if text or not calls:
        builder.message(role, text)
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            builder.tool_call(str(function.get("name", "")), str(function.get("arguments", "")))


def _usage(plan: Plan) -> dict[str, Any]:
    """The answer's usage; its reasoning tokens in ``completion_tokens_details``, as
    OpenAI and vLLM report them, or with ``[[sglang]]`` beside the other counts."""
    usage: dict[str, Any] = {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
    }
    if plan.sglang_usage:
        usage["reasoning_tokens"] = plan.reasoning_tokens
    else:
        usage["completion_tokens_details"] = {"reasoning_tokens": plan.reasoning_tokens}
    return usage


def completion(request: ChatRequest, plan: Plan) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    plan, sequence = stopped(request, tagged(plan))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": plan.content if plan.text or not (plan.tool_calls or plan.refusal) else None,
    }
    if plan.refusal:
        message["refusal"] = plan.refusal_text
    if plan.tool_calls:
        message["tool_calls"] = [
            {"id": call.call_id, **called(plan, call.name, call.arguments)}
            for call in plan.tool_calls
        ]
    if plan.reasoning:
        message[request.reasoning_field] = plan.reasoning_text
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": _logprobs(request, plan.text),
                "finish_reason": plan.finish_reason,
                **({"stop_reason": sequence} if sequence else {}),
            }
        ],
        "usage": _usage(plan),
    }


def _logprobs(request: ChatRequest, words: list[str]) -> dict[str, Any] | None:
    if request.top_logprobs is None:
        return None
    return {"content": [word_logprob(w, request.top_logprobs) for w in words], "refusal": None}


def completion_frames(request: ChatRequest, plan: Plan) -> Iterator[Frame]:
    """The ``chat.completion.chunk`` SSE frames, ``[DONE]`` included."""
    plan, sequence = stopped(request, tagged(plan))
    # Every chunk shares its envelope, so only the delta is serialised per chunk.
    envelope = b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s' % (
        new_id("chatcmpl-").encode(),
        int(time.time()),
        orjson.dumps(request.model),
    )
    usage_null = b',"usage":null' if request.include_usage else b""
    open_delta = envelope + b',"choices":[{"index":0,"delta":'
    close_delta = b',"logprobs":null,"finish_reason":null}]' + usage_null + b"}\n\n"

    def delta(fields: dict[str, Any]) -> bytes:
        return open_delta + orjson.dumps(fields) + close_delta

    yield delta(_opening(plan)), STRUCT
    for word in plan.reasoning:
        yield delta({request.reasoning_field: word}), PAYLOAD
    for word in plan.text:
        if request.top_logprobs is None:
            yield delta({"content": word}), PAYLOAD
        else:
            logprobs = orjson.dumps(_logprobs(request, [word]))
            chunk = open_delta + orjson.dumps({"content": word}) + b',"logprobs":' + logprobs
            yield chunk + b',"finish_reason":null}]' + usage_null + b"}\n\n", PAYLOAD
    for word in plan.refusal:
        yield delta({"refusal": word}), PAYLOAD
    for fragment, kind in call_fragments(plan):
        yield delta({"tool_calls": [fragment]}), kind
    finish = orjson.dumps(plan.finish_reason)
    if sequence:
        finish += b',"stop_reason":' + orjson.dumps(sequence)
    yield (
        open_delta
        + b'{},"logprobs":null,"finish_reason":'
        + finish
        + b"}]"
        + usage_null
        + b"}\n\n",
        END,
    )
    if request.include_usage:
        yield envelope + b',"choices":[],"usage":' + orjson.dumps(_usage(plan)) + b"}\n\n", END
    yield _DONE, END


LLAMA_CPP_TOO_LONG = (
    "the request exceeds the available context size. try increasing the context size or "
    "enable context shift"
)
"""llama-server's words for a prompt over its context."""


def llama_cpp_refusal() -> list[Frame]:
    """A streamed prompt over the context refused as llama-server's builds of 2025 refused
    it (ggml-org/llama.cpp#16109, #15780): after a 200's headers, a line of a field named
    ``error`` (which event-stream readers drop) typed ``invalid_request_error``, then
    ``data: [DONE]``."""
    error = {"code": 400, "message": LLAMA_CPP_TOO_LONG, "type": "invalid_request_error"}
    return llama_cpp_error(error)


def llama_cpp_error(error: dict[str, Any]) -> list[Frame]:
    """A stream's failure as llama-server's builds of 2025 wrote it: a line of a field
    named ``error``, then ``data: [DONE]``."""
    return [(b"error: " + orjson.dumps(error) + b"\n\n", END), (_DONE, END)]


def unanswered() -> list[Frame]:
    """A stream of ``data: [DONE]`` alone: vLLM's, when an error came before the first
    token (``[[unanswered]]``)."""
    return [(_DONE, END)]


def overrun(frames: Iterable[Frame]) -> Iterator[Frame]:
    """``frames`` with their ``data: [DONE]`` going on with another data line in its event
    (``[[overrun]]``): a server writing past its stream's end."""
    for frame, kind in frames:
        yield (_OVERRUN if frame == _DONE else frame), kind


def _opening(plan: Plan) -> dict[str, Any]:
    """The first chunk's delta: as OpenAI opens a refusal, ``content`` null and an empty
    ``refusal``; else an empty ``content``."""
    if plan.refusal and not plan.text:
        return {"role": "assistant", "content": None, "refusal": ""}
    return {"role": "assistant", "content": ""}
