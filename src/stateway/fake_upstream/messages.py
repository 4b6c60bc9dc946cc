"""Anthropic Messages wire (``POST /v1/messages``), as Anthropic speaks it.

Parses ``system`` and ``messages`` into a :class:`Conversation` (after the checks of
:mod:`.messages_checks`, which refuse what Anthropic refuses) and renders a :class:`Plan`
as a ``message`` object or as the event stream: ``message_start``, ``ping``, per content
block ``content_block_start`` / ``content_block_delta`` / ``content_block_stop``, then
``message_delta`` and ``message_stop``; every frame has an ``event:`` line.

Reasoning is a ``thinking`` block signed with :func:`signature_of` its text (with
``thinking.display: "omitted"``, an empty block whose signature carries the text); the
checks refuse a thinking block sent back with any other signature, so a gateway that
altered either is caught. With ``thinking: {"type": "disabled"}`` the model does not
think: no thinking block, a scripted ``[[reason:...]]`` notwithstanding.
``stop_sequences`` are honoured: the text ends before the first one it contains, with
``stop_reason: "stop_sequence"``. A refusal ends with ``stop_reason: "refusal"`` and its
``stop_details``; ``[[stop:REASON]]`` ends the answer with that reason. Of a user turn
that merges the messages a compaction kept and its summary, the summary on is the last
user message (the one that scripts the answer), as on the other wires. A request with
``safeguards`` (Claude Code's auto mode asking for Anthropic's check of risky tool calls)
is answered a ``safeguard_results`` entry per safeguard, beside the stop reason (the
message's, a stream's ``message_delta``'s): its ``type``, with the status ``available``
and, under ``tool_uses``, each tool call's id judged :data:`NOT_FLAGGED`.

Each ``document`` with ``citations.enabled`` is cited, as Anthropic cites: after the
answer's text, a text block quoting it whole, whose ``citations`` point at it by its
``document_index`` (its place among the request's documents): a ``char_location`` for
plain text, a ``content_block_location`` for custom content, a ``page_location`` (page 1)
for a PDF. Streamed, a cited block's ``citations_delta`` comes before its text.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.conversation import Conversation, ConversationBuilder, content_text
from stateway.fake_upstream.delivery import END, PAYLOAD, STRUCT, Frame
from stateway.fake_upstream.errors import UpstreamError, context_too_long
from stateway.fake_upstream.messages_checks import check_messages_request
from stateway.fake_upstream.plan import Plan, argument_chunks, new_id, summary_asked, word_chunks

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "refusal": "refusal",
}
REFUSAL_DETAILS = {
    "type": "refusal",
    "category": None,
    "explanation": "The fake model declined, as scripted.",
}
"""The ``stop_details`` of a refusal (``[[refuse]]``): no named policy category."""
NOT_FLAGGED = {"type": "evaluated", "outcome": "not_flagged"}
"""The verdict on each tool call of an answer whose request asked for ``safeguards``."""


def signature_of(thinking: str, *, omitted: bool = False) -> str:
    """The fake model's signature on a thinking block's text; ``omitted``: the signature of
    a block shown without its text (``thinking.display: "omitted"``), which carries the
    text, as Anthropic's does."""
    digest = hashlib.sha256(b"fake-thinking:" + thinking.encode()).digest()
    signature = base64.b64encode(digest).decode()
    if not omitted:
        return signature
    return base64.urlsafe_b64encode(thinking.encode()).decode() + "." + signature


def signed_thinking(thinking: str, signature: str) -> str | None:
    """The thinking of a block sent back (carried in its signature when its text was
    omitted), or None when the signature is not the fake's on it."""
    if thinking or "." not in signature:
        return thinking if signature == signature_of(thinking) else None
    carried = signature.partition(".")[0]
    try:
        text = base64.urlsafe_b64decode(carried.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return text if signature == signature_of(text, omitted=True) else None


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A validated Messages request."""

    model: str
    stream: bool
    max_tokens: int | None
    conversation: Conversation
    stop_sequences: tuple[str, ...] = ()
    omit_thinking: bool = False
    """``thinking.display: "omitted"``: thinking blocks without their text."""
    no_thinking: bool = False
    """``thinking.type: "disabled"``: no thinking blocks, whatever the script says."""
    citations: tuple[dict[str, Any], ...] = ()
    """One citation of each document that enabled them (:func:`document_citations`)."""
    safeguards: tuple[str, ...] = ()
    """The ``type`` of each of the request's ``safeguards``."""

    def body(self, plan: Plan) -> bytes:
        return orjson.dumps(message_object(self, plan))

    def frames(self, plan: Plan) -> Iterator[Frame]:
        return message_frames(self, plan)

    def context_error(self, window: int) -> UpstreamError:
        return context_too_long(self.conversation.prompt_tokens, window, "anthropic")

    def error_frame(self, message: str, sequence: int, code: str | None = None) -> bytes:
        """A mid-stream ``error`` event, as Anthropic sends one (with no code)."""
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"


def parse_messages_request(body: dict[str, Any], headers: Mapping[str, str]) -> MessagesRequest:
    """``headers``: the request's, by lower-case name (its ``anthropic-beta`` features)."""
    betas = [beta.strip() for beta in headers.get("anthropic-beta", "").split(",")]
    check_messages_request(body, signed_thinking, betas=betas)
    thinking = body.get("thinking")
    return MessagesRequest(
        model=body["model"],
        stream=body.get("stream") is True,
        max_tokens=body["max_tokens"],
        conversation=messages_conversation(body),
        stop_sequences=tuple(body.get("stop_sequences") or ()),
        omit_thinking=isinstance(thinking, dict) and thinking.get("display") == "omitted",
        no_thinking=isinstance(thinking, dict) and thinking.get("type") == "disabled",
        citations=document_citations(body["messages"]),
        safeguards=tuple(str(asked.get("type")) for asked in body.get("safeguards") or ()),
    )


def document_citations(messages: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """A citation of each ``document`` block that enabled them, quoting it whole."""
    documents = [
        block
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "document"
    ]
    return tuple(
        _citation(index, document)
        for index, document in enumerate(documents)
        if (document.get("citations") or {}).get("enabled") is True
    )


def _citation(index: int, document: dict[str, Any]) -> dict[str, Any]:
    source = document["source"]
    cited: dict[str, Any] = {"document_index": index, "document_title": document.get("title")}
    if source["type"] == "text":
        text = str(source["data"])
        where = {"type": "char_location", "start_char_index": 0, "end_char_index": len(text)}
    elif source["type"] == "content":
        content = source["content"]
        blocks = [{"text": content}] if isinstance(content, str) else content
        text = "".join(str(block.get("text", "")) for block in blocks)
        where = {"type": "content_block_location", "start_block_index": 0}
        where["end_block_index"] = len(blocks)
    else:
        text = "page 1"
        where = {"type": "page_location", "start_page_number": 1, "end_page_number": 2}
    return where | {"cited_text": text} | cited


def messages_conversation(body: dict[str, Any]) -> Conversation:
    """The conversation of a checked Messages (or count_tokens) body."""
    builder = ConversationBuilder()
    system = body.get("system")
    if system:
        builder.message("system", content_text(system))
    for message in body["messages"]:
        _add_message(builder, message)
    return builder.build()


def _add_message(builder: ConversationBuilder, message: dict[str, Any]) -> None:
    role: str = message["role"]
    content = message["content"]
    if isinstance(content, str):
        builder.message(role, content)
        return
    results = [b for b in content if b.get("type") == "tool_result"]
    for block in results:
        builder.tool_result(str(block["tool_use_id"]), content_text(block.get("content")))
    if results:  # text beside tool results (reminders) does not re-script the turn, but
        for block in content:  # the gateway's compaction prompt asks for a summary
            if block.get("type") == "text" and summary_asked(str(block.get("text"))) is not None:
                builder.message(role, block["text"])
        return
    texts: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "thinking":
            text = str(block.get("thinking", ""))
            builder.reasoning(signed_thinking(text, str(block.get("signature", ""))) or text)
        elif kind == "tool_use":
            builder.tool_call(str(block.get("name", "")), orjson.dumps(block["input"]).decode())
        elif kind == "text":
            texts.append(str(block["text"]))
        elif kind in ("image", "document"):
            texts.append(f"<{kind}>")
        elif kind == "search_result":
            texts.append(content_text([block]))
    if texts and summary_asked(texts[-1]) is not None:  # the prompt after the turn, merged
        builder.message(role, "".join(texts[:-1]))
        texts = texts[-1:]
    # A compaction's summary after the user messages it kept, merged into one turn: they
    # script no more, as on the other wires, where the summary is a message of its own.
    shown = [i for i, text in enumerate(texts) if text.startswith(SUMMARY_PREFIX)]
    if shown and shown[-1] > 0:
        builder.message(role, "".join(texts[: shown[-1]]))
        texts = texts[shown[-1] :]
    if texts or role != "assistant":
        builder.message(role, "".join(texts))


def _stopped(request: MessagesRequest, plan: Plan) -> tuple[Plan, str | None]:
    """``plan`` cut before the first stop sequence its text holds, and that sequence; a
    refusal is text here (ended by ``stop_reason: "refusal"``); thinking disabled, no
    reasoning."""
    if request.no_thinking and plan.reasoning:
        plan = replace(plan, reasoning=[])
    if plan.refusal:
        return replace(plan, text=list(plan.refusal), refusal=(), finish_reason="refusal"), None
    content = plan.content
    found = [(content.find(s), s) for s in request.stop_sequences if s and s in content]
    if not found:
        return plan, None
    position, sequence = min(found)
    return replace(plan, text=word_chunks(content[:position]), finish_reason="stop"), sequence


def _blocks(request: MessagesRequest, plan: Plan) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    omit_thinking = request.omit_thinking
    if plan.reasoning:
        thinking = plan.reasoning_text
        signature = signature_of(thinking, omitted=omit_thinking)
        shown = "" if omit_thinking else thinking
        blocks.append({"type": "thinking", "thinking": shown, "signature": signature})
    if plan.text or not plan.tool_calls:
        blocks.append({"type": "text", "text": plan.content})
        blocks += [
            {"type": "text", "text": cited["cited_text"], "citations": [cited]}
            for cited in request.citations
        ]
    for call in plan.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.call_id,
                "name": call.name,
                "input": _input(call.arguments),
            }
        )
    return blocks


def _input(arguments: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _usage(plan: Plan, *, output: bool = True) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": plan.prompt_tokens - plan.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": plan.cached_tokens,
        "output_tokens": plan.completion_tokens if output else 1,
    }
    if output and plan.reasoning:
        usage["output_tokens_details"] = {"thinking_tokens": plan.reasoning_tokens}
    return usage


def message_object(request: MessagesRequest, plan: Plan) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    plan, sequence = _stopped(request, plan)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": _blocks(request, plan),
        **_stop(request, plan, sequence),
        "usage": _usage(plan),
    }


def _stop(request: MessagesRequest, plan: Plan, sequence: str | None) -> dict[str, Any]:
    """``stop_reason`` and ``stop_sequence``, the ``stop_details`` of a refusal, and the
    ``safeguard_results`` of the safeguards asked."""
    reason = "stop_sequence" if sequence else plan.stop_reason
    stop: dict[str, Any] = {
        "stop_reason": reason or _STOP_REASONS[plan.finish_reason],
        "stop_sequence": sequence,
    }
    if stop["stop_reason"] == "refusal":
        stop["stop_details"] = REFUSAL_DETAILS
    if request.safeguards:
        verdicts = {call.call_id: dict(NOT_FLAGGED) for call in plan.tool_calls}
        status = {"type": "available", "tool_uses": verdicts}
        stop["safeguard_results"] = [
            {"type": kind, "status": status} for kind in request.safeguards
        ]
    return stop


def message_frames(request: MessagesRequest, plan: Plan) -> Iterator[Frame]:
    """The event stream, ``message_start`` to ``message_stop``."""
    plan, sequence = _stopped(request, plan)

    def event(data: dict[str, Any], kind: int = STRUCT) -> Frame:
        name: str = data["type"]
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n", kind

    start: dict[str, Any] = {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(plan, output=False),
    }
    yield event({"type": "message_start", "message": start})
    yield event({"type": "ping"})
    for index, block in enumerate(_blocks(request, plan)):
        kind = block["type"]
        opened = {
            "thinking": {**block, "thinking": "", "signature": ""},
            "text": {"type": "text", "text": ""},
        }
        yield event(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": opened.get(kind, {**block, "input": {}}),
            }
        )
        for delta in _deltas(block, plan):
            yield event({"type": "content_block_delta", "index": index, "delta": delta}, PAYLOAD)
        if kind == "thinking":
            signature = {"type": "signature_delta", "signature": block["signature"]}
            yield event({"type": "content_block_delta", "index": index, "delta": signature})
        yield event({"type": "content_block_stop", "index": index})
    usage = _usage(plan)
    yield event(
        {"type": "message_delta", "delta": _stop(request, plan, sequence), "usage": usage}, END
    )
    yield event({"type": "message_stop"}, END)


def _deltas(block: dict[str, Any], plan: Plan) -> Iterator[dict[str, Any]]:
    match block["type"]:
        case "thinking":
            for word in plan.reasoning if block["thinking"] else ():
                yield {"type": "thinking_delta", "thinking": word}
        case "text" if "citations" in block:
            for citation in block["citations"]:
                yield {"type": "citations_delta", "citation": citation}
            yield {"type": "text_delta", "text": block["text"]}
        case "text":
            for word in plan.text:
                yield {"type": "text_delta", "text": word}
        case "tool_use":  # every input opens with an empty piece, as Anthropic streams
            yield {"type": "input_json_delta", "partial_json": ""}  # it (and one without
            if block["input"]:  # input sends only that)
                for piece in argument_chunks(orjson.dumps(block["input"]).decode()):
                    yield {"type": "input_json_delta", "partial_json": piece}
