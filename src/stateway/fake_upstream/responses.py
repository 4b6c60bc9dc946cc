"""Stateless Responses wire (``POST /v1/responses``), as vLLM serves it with ``store: false``.

Parses ``instructions`` and ``input`` into a :class:`Conversation` and renders a
:class:`Plan` as a ``response`` object, or as the standard event stream (``event: TYPE`` /
``data: JSON`` frames, ``sequence_number`` from 0) ending in ``response.completed`` or
``response.incomplete``.

With ``include: ["reasoning.encrypted_content"]`` a reasoning item carries its text in
``encrypted_content`` (signed as the Messages wire signs omitted thinking); a reasoning
item sent back with ``encrypted_content`` is read from it alone, and one that is not the
fake's is refused with 400 ``invalid_encrypted_content``, as OpenAI refuses it. With
``min_output_tokens`` (16 for hosted OpenAI's bound) a smaller ``max_output_tokens`` is
refused with 400 ``integer_below_min_value`` on that param, in hosted's words; vLLM takes
any positive one, as the fake does by default.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

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
from stateway.fake_upstream.messages import signature_of, signed_thinking
from stateway.fake_upstream.plan import (
    Plan,
    argument_chunks,
    new_id,
    word_chunks,
    word_logprob,
)

PARAGRAPH_BREAK = "\n\n"
"""Between the parts of a hidden reasoning's summary: one part per paragraph of its text,
as OpenAI's summaries come in parts."""


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A validated Responses request (the raw body is kept to echo its settings)."""

    raw: dict[str, Any]
    model: str
    stream: bool
    max_tokens: int | None
    conversation: Conversation
    top_logprobs: int | None = None
    """How many alternatives each token's logprobs list; None: not included."""
    sealed: bool = False
    """Whether reasoning items carry ``encrypted_content`` (it was included)."""

    def body(self, plan: Plan) -> bytes:
        return orjson.dumps(response_object(self, plan, new_id("resp_"), int(time.time())))

    def frames(self, plan: Plan) -> Iterator[Frame]:
        return response_frames(self, plan)

    def context_error(self, window: int) -> UpstreamError:
        return context_too_long(self.conversation.prompt_tokens, window, "openai")

    def error_frame(self, message: str, sequence: int, code: str | None = None) -> bytes:
        """A mid-stream ``error`` event (numbered after the ``sequence`` events sent)."""
        error = {"type": "error", "sequence_number": sequence, "code": code or "server_error"}
        data = orjson.dumps({**error, "message": message, "param": None})
        return b"event: error\ndata: " + data + b"\n\n"


def parse_responses_request(body: dict[str, Any], min_output_tokens: int = 1) -> ResponsesRequest:
    model = require_str(body, "model")
    previous = body.get("previous_response_id")
    if previous is not None:
        message = f"Response with id '{previous}' not found (this upstream is stateless)."
        raise UpstreamError(404, message, param="previous_response_id")
    source = body.get("input")
    if isinstance(source, str):
        source = [{"role": "user", "content": source}]
    if not isinstance(source, list):
        raise invalid_request("Missing required parameter: 'input'.", "input")
    top_logprobs = optional_top_logprobs(body)
    builder = ConversationBuilder()
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        builder.message("instructions", instructions)
    for index, item in enumerate(source):
        if not isinstance(item, dict):
            raise invalid_request(f"Invalid input item at index {index}.", f"input[{index}]")
        _add_item(builder, item)
    include = body.get("include") or ()
    max_tokens = optional_positive_int(body, "max_output_tokens")
    if max_tokens is not None and max_tokens < min_output_tokens:
        raise _below_minimum(max_tokens, min_output_tokens)
    return ResponsesRequest(
        raw=body,
        model=model,
        stream=body.get("stream") is True,
        max_tokens=max_tokens,
        conversation=builder.build(),
        top_logprobs=top_logprobs if LOGPROBS in include else None,
        sealed=ENCRYPTED in include,
    )


def _below_minimum(tokens: int, least: int) -> UpstreamError:
    """A ``max_output_tokens`` under ``least``, refused as hosted OpenAI refuses one under
    16."""
    message = (
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
        f"{least}, but got {tokens} instead."
    )
    return UpstreamError(400, message, code="integer_below_min_value", param="max_output_tokens")


def _add_item(builder: ConversationBuilder, item: dict[str, Any]) -> None:
    kind = item.get("type") or ("message" if "role" in item else "")
    if kind == "message":
        builder.message(str(item.get("role", "")), content_text(item.get("content")))
    elif kind == "function_call":
        builder.tool_call(str(item.get("name", "")), str(item.get("arguments", "")))
    elif kind == "function_call_output":
        builder.tool_result(str(item.get("call_id", "")), content_text(item.get("output")))
    elif kind == "reasoning":
        blob = item.get("encrypted_content")
        if blob is not None:
            builder.reasoning(_unsealed(item, blob))
        else:
            builder.reasoning(content_text(item.get("content") or item.get("summary")))
    elif kind.endswith("_output"):  # another tool's output (shell_call_output, ...)
        builder.tool_result(str(item.get("call_id", "")), content_text(item.get("output")))
    else:
        builder.other(str(kind))


LOGPROBS = "message.output_text.logprobs"
ENCRYPTED = "reasoning.encrypted_content"


def _unsealed(item: dict[str, Any], blob: object) -> str:
    text = signed_thinking("", blob) if isinstance(blob, str) else None
    if text is None:
        message = f"The encrypted content for item {item.get('id')} could not be verified."
        raise UpstreamError(400, message, code="invalid_encrypted_content")
    return text


def _tokens(request: ResponsesRequest, words: list[str]) -> list[dict[str, Any]]:
    """The words' tokens when the request includes them, else none (as OpenAI answers)."""
    if request.top_logprobs is None:
        return []
    return [word_logprob(word, request.top_logprobs) for word in words]


def _output_items(request: ResponsesRequest, plan: Plan) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if plan.reasoning:
        content = [{"type": "reasoning_text", "text": plan.reasoning_text}]
        item = _reasoning_item(new_id("rs_"), [] if plan.hidden else content, "completed")
        if plan.hidden and (request.raw.get("reasoning") or {}).get("summary"):
            item["summary"] = [
                {"type": "summary_text", "text": paragraph}
                for paragraph in plan.reasoning_text.split(PARAGRAPH_BREAK)
            ]
        if request.sealed:
            item["encrypted_content"] = signature_of(plan.reasoning_text, omitted=True)
        items.append(item)
    if plan.refusal:
        refusal: dict[str, Any] = {"type": "refusal", "refusal": plan.refusal_text}
        items.append(_message_item(new_id("msg_"), [refusal], "completed"))
    elif plan.text or not (plan.tool_calls or plan.reasoning or plan.items):
        part = {
            "type": "output_text",
            "text": plan.content,
            "annotations": [],
            "logprobs": _tokens(request, plan.text),
        }
        items.append(_message_item(new_id("msg_"), [part], "completed"))
    for call in plan.tool_calls:
        items.append(
            _call_item(new_id("fc_"), call.call_id, call.name, call.arguments, "completed")
        )
    items.extend(dict(item) for item in plan.items)
    if plan.finish_reason == "length" and items:
        items[-1]["status"] = "incomplete"
    return items


def _reasoning_item(item_id: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def _message_item(item_id: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_object(
    request: ResponsesRequest, plan: Plan, response_id: str, created: int
) -> dict[str, Any]:
    """The final ``response`` object (status ``completed`` or ``incomplete``)."""
    raw = request.raw
    incomplete = plan.finish_reason == "length"
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "incomplete" if incomplete else "completed",
        "completed_at": None if incomplete else int(time.time()),
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": raw.get("instructions"),
        "max_output_tokens": request.max_tokens,
        "max_tool_calls": raw.get("max_tool_calls"),
        "metadata": raw.get("metadata") or {},
        "model": request.model,
        "output": _output_items(request, plan),
        "parallel_tool_calls": raw.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": raw.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": raw.get("service_tier") or "auto",
        "store": False,
        "temperature": raw.get("temperature", 1.0),
        "text": raw.get("text") or {"format": {"type": "text"}},
        "tool_choice": raw.get("tool_choice", "auto"),
        "tools": raw.get("tools") or [],
        "top_p": raw.get("top_p", 1.0),
        "truncation": raw.get("truncation") or "disabled",
        "usage": {
            "input_tokens": plan.prompt_tokens,
            "input_tokens_details": {"cached_tokens": plan.cached_tokens},
            "output_tokens": plan.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
            "total_tokens": plan.prompt_tokens + plan.completion_tokens,
        },
        "user": raw.get("user"),
    }


def _refusal_events(
    event: Any, item: dict[str, Any], index: int, chunks: tuple[str, ...]
) -> Iterator[Frame]:
    """A refusal message's events but its ``output_item.done``, as OpenAI streams them."""
    empty = {**item, "status": "in_progress", "content": []}
    yield event("response.output_item.added", {"output_index": index, "item": empty})
    at = {"item_id": item["id"], "output_index": index, "content_index": 0}
    part = item["content"][0]
    yield event("response.content_part.added", {**at, "part": {**part, "refusal": ""}})
    for word in chunks:
        yield event("response.refusal.delta", {**at, "delta": word}, PAYLOAD)
    yield event("response.refusal.done", {**at, "refusal": part["refusal"]})
    yield event("response.content_part.done", {**at, "part": part})


def _hidden_reasoning_events(event: Any, item: dict[str, Any], index: int) -> Iterator[Frame]:
    """A hidden reasoning item's events but its ``output_item.done``: its summary, if it
    has one, as OpenAI streams it: part by part, each under its ``summary_index``."""
    empty = {**item, "status": "in_progress", "summary": [], "encrypted_content": None}
    yield event("response.output_item.added", {"output_index": index, "item": empty})
    for part_index, part in enumerate(item["summary"]):
        at = {"item_id": item["id"], "output_index": index, "summary_index": part_index}
        yield event("response.reasoning_summary_part.added", {**at, "part": {**part, "text": ""}})
        for word in word_chunks(part["text"]):
            yield event("response.reasoning_summary_text.delta", {**at, "delta": word}, PAYLOAD)
        yield event("response.reasoning_summary_text.done", {**at, "text": part["text"]})
        yield event("response.reasoning_summary_part.done", {**at, "part": part})


def _custom_call_events(event: Any, item: dict[str, Any], index: int) -> Iterator[Frame]:
    """A custom tool's call's events but its ``output_item.done``, as OpenAI streams them:
    added with no input yet, then its input in pieces."""
    empty = {**item, "status": "in_progress", "input": ""}
    yield event("response.output_item.added", {"output_index": index, "item": empty})
    at = {"item_id": item["id"], "output_index": index}
    raw = str(item.get("input") or "")
    for piece in argument_chunks(raw):
        yield event("response.custom_tool_call_input.delta", {**at, "delta": piece}, PAYLOAD)
    yield event("response.custom_tool_call_input.done", {**at, "input": raw})


def response_frames(request: ResponsesRequest, plan: Plan) -> Iterator[Frame]:
    """The event stream: created, in_progress, each output item, completed/incomplete."""
    final = response_object(request, plan, new_id("resp_"), int(time.time()))
    pending = {**final, "status": "in_progress", "completed_at": None, "output": []}
    pending.update(incomplete_details=None, usage=None)
    sequence = itertools.count()

    def event(kind: str, fields: dict[str, Any], frame_kind: int = STRUCT) -> Frame:
        data = orjson.dumps({"type": kind, "sequence_number": next(sequence), **fields})
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n", frame_kind

    yield event("response.created", {"response": pending})
    yield event("response.in_progress", {"response": pending})
    chunks = {"reasoning": plan.reasoning, "message": plan.text}
    whole = len(final["output"]) - len(plan.items)  # [[item]]s come last, whole
    for index, item in enumerate(final["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if index >= whole and plan.item_pieces and item.get("type") == "custom_tool_call":
            yield from _custom_call_events(event, item, index)
        elif index >= whole:
            yield event("response.output_item.added", {"output_index": index, "item": item})
        elif item["type"] == "message" and item["content"][0]["type"] == "refusal":
            yield from _refusal_events(event, item, index, plan.refusal)
        elif item["type"] == "reasoning" and plan.hidden:
            yield from _hidden_reasoning_events(event, item, index)
        elif item["type"] == "function_call":
            added = _call_item(item["id"], item["call_id"], item["name"], "", "in_progress")
            yield event("response.output_item.added", {"output_index": index, "item": added})
            for piece in argument_chunks(item["arguments"]):
                yield event(
                    "response.function_call_arguments.delta", {**at, "delta": piece}, PAYLOAD
                )
            done = {**at, "name": item["name"], "arguments": item["arguments"]}
            yield event("response.function_call_arguments.done", done)
        else:
            # Reasoning and message items both hold one streamed content part.
            is_reasoning = item["type"] == "reasoning"
            empty = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", {"output_index": index, "item": empty})
            part = item["content"][0]
            at_part = {**at, "content_index": 0}
            opened = {**part, "text": ""} | ({} if is_reasoning else {"logprobs": []})
            yield event("response.content_part.added", {**at_part, "part": opened})
            prefix = "response.reasoning_text" if is_reasoning else "response.output_text"
            for word in chunks[item["type"]]:
                extra = {} if is_reasoning else {"logprobs": _tokens(request, [word])}
                yield event(f"{prefix}.delta", {**at_part, **extra, "delta": word}, PAYLOAD)
            extra = {} if is_reasoning else {"logprobs": part["logprobs"]}
            yield event(f"{prefix}.done", {**at_part, **extra, "text": part["text"]})
            yield event("response.content_part.done", {**at_part, "part": part})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield event(terminal, {"response": final}, END)
