"""Canonical stream events -> Messages SSE frames, exactly as Anthropic sends them.

``message_start`` (then a ``ping``) when the response is created, its usage the prompt's
as an Anthropic upstream reported it before any output (zeros when the upstream reports
usage only at the end: a Chat or Responses upstream); for each output item
the client sees, ``content_block_start`` (``text``, ``thinking``, ``redacted_thinking``
or ``tool_use``), its ``content_block_delta`` events (``text_delta``: a message's text,
then its refusal a blank line after it, if the model declined; a ``citations_delta``
for each citation an Anthropic upstream gave the text, and for each hit of a search
shown that the text names, once the text is done;
``thinking_delta`` unless the client asked for thinking without its text,
``input_json_delta``; a
``signature_delta`` before a signed thinking block stops) and ``content_block_stop``; a
call of a gateway tool the client declared (web search, an MCP server, the tool search),
once it has run,
as its use block (its input in one ``input_json_delta``) and its result block
(:mod:`.server_tools`), the blocks of the items after it (a mixed round's client call)
waiting for them; a compaction, once summarized, as its ``compaction`` block
(``content`` null, its ``signature``), one ``compaction_delta`` with the summary and its
``content_block_stop``; at the end ``message_delta`` (stop reason, cumulative usage) and
``message_stop`` — or, for a response that failed, one ``error`` event and no
``message_stop`` (nor a ``content_block_stop`` for the block it cut off). Blocks are
numbered in the order they start; items the client does not see (the gateway's own tool
calls) take no number.

Every frame has an ``event:`` line equal to its ``data.type`` (the SDK skips frames
without one). One :class:`MessagesStream` encodes one response.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import orjson

from stateway.core import events as ev
from stateway.core.compaction.sealed import COMPACTION
from stateway.core.compaction.view import SHOWN
from stateway.core.errors import GatewayError
from stateway.core.items import FUNCTION_CALL, MESSAGE, REASONING, Item
from stateway.core.reasoning import thinking_of
from stateway.core.response import ResponseState
from stateway.core.threads import message_id
from stateway.core.usage import Usage
from stateway.protocols.messages.context_edits import applied_edits
from stateway.protocols.messages.encode import (
    REFUSAL_BREAK,
    citations,
    compaction_block,
    encode_usage,
    message_usage,
    stop_fields,
    thinking_hidden,
    thinking_omitted,
    tool_input,
    tool_use_start,
)
from stateway.protocols.messages.errors import encode_error, stream_error
from stateway.protocols.messages.server_tools import SearchResults, Shown
from stateway.protocols.messages.streamed_input import StreamedInput

PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'
_FAILED: Final = frozenset({"failed", "cancelled"})


_USE_BLOCKS: Final = frozenset({"server_tool_use", "mcp_tool_use"})


def frame(data: dict[str, Any]) -> bytes:
    kind: str = data["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def encode_error_event(error: GatewayError) -> bytes:
    """The ``error`` event ending a stream the gateway cut off (an API key revoked while
    it streamed: ``authentication_error``)."""
    return frame(encode_error(error))


class MessagesStream:
    __slots__ = (
        "_blocks",
        "_count",
        "_earlier",
        "_held",
        "_hidden",
        "_inputs",
        "_omitted",
        "_refusing",
        "_results",
        "_running",
        "_shown",
    )

    def __init__(self, earlier: Iterable[Item] = ()) -> None:
        """``earlier``: the request's input, whose turn's searches the answer cites too
        (:class:`SearchResults`)."""
        self._earlier = earlier
        self._blocks: dict[int, int] = {}
        """Output index -> content block index, for the items the client sees."""
        self._count = 0
        """Content blocks started so far."""
        self._shown = Shown()
        """The gateway calls shown: those of tools the client declared."""
        self._omitted = False
        """Thinking without its text (``display: "omitted"``): no ``thinking_delta``."""
        self._hidden = False
        """Thinking not enabled: no thinking blocks."""
        self._refusing: set[int] = set()
        """Output indexes of messages whose refusal, after their text, began."""
        self._results: SearchResults | None = None
        """The hits of the searches shown so far (when the client declared web search)."""
        self._inputs: dict[int, StreamedInput] = {}
        """The arguments of the calls streaming, by output index (:mod:`.streamed_input`)."""
        self._running: set[int] = set()
        """Output indexes of the shown gateway calls whose blocks are not out yet."""
        self._held: list[ev.Event] = []
        """Events of the items after a running shown call, held until its blocks are out."""

    def encode(self, event: ev.Event) -> bytes:
        """The frames of one canonical event (often none). The items after a shown gateway
        call (a mixed round's client call) wait for its blocks, which come once it has run:
        the blocks stream in the order the non-streamed message has them."""
        at = getattr(event, "output_index", None)
        if isinstance(event, ev.ItemAdded) and self._shown.shows(event.item):
            self._running.add(event.output_index)
        if at is not None and self._running and at > min(self._running):
            self._held.append(event)
            return b""
        out = self._encode(event)
        if isinstance(event, ev.ItemDone):
            done = event.output_index
            self._running.discard(done)
            if self._held and (not self._running or min(self._running) > done):
                held, self._held = self._held, []
                out += b"".join(self.encode(waiting) for waiting in held)
        return out

    def _encode(self, event: ev.Event) -> bytes:
        match event:
            case ev.TextDelta(output_index=at, delta=delta):
                return self._delta(at, {"type": "text_delta", "text": delta})
            case ev.RefusalDelta(output_index=at, content_index=part, delta=delta):
                if part and at not in self._refusing:  # after the message's text: apart
                    self._refusing.add(at)
                    delta = REFUSAL_BREAK + delta
                return self._delta(at, {"type": "text_delta", "text": delta})
            case ev.ReasoningDelta(output_index=at, delta=delta):
                if self._omitted:
                    return b""
                return self._delta(at, {"type": "thinking_delta", "thinking": delta})
            case ev.ArgumentsDelta(output_index=at, delta=delta):
                said = self._inputs.setdefault(at, StreamedInput()).feed(delta)
                if not said:
                    return b""
                return self._delta(at, {"type": "input_json_delta", "partial_json": said})
            case ev.PartDone(output_index=at, part=part) if "citations" in part or (
                self._results is not None and part.get("annotations")
            ):
                cited = citations(part, self._results)
                deltas = [{"type": "citations_delta", "citation": c} for c in cited]
                return b"".join(self._delta(at, delta) for delta in deltas)
            case ev.ItemAdded(output_index=at, item=item):
                return self._start(at, item)
            case ev.ItemDone(output_index=at, item=item):
                return self._stop(at, item)
            case ev.ResponseCreated(response=state):
                self._shown = Shown.of(state)
                self._results = SearchResults(self._earlier) if self._shown.searches else None
                self._omitted = thinking_omitted(state)
                self._hidden = thinking_hidden(state)
                return frame({"type": "message_start", "message": _started(state)}) + PING
            case ev.ResponseFinished(response=state):
                return _finished(state, self._shown)
            case _:
                return b""

    def _start(self, output_index: int, item: dict[str, Any]) -> bytes:
        kind = item.get("type")
        if kind == MESSAGE:
            block: dict[str, Any] = {"type": "text", "text": ""}
        elif kind == REASONING and self._hidden:
            return b""
        elif kind == REASONING:  # text and signature come as deltas
            thinking = thinking_of(item)
            if thinking.redacted:
                block = {"type": "redacted_thinking", "data": thinking.seal}
            else:
                block = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == FUNCTION_CALL:
            block = tool_use_start(item)
        else:
            return b""
        index = self._next()
        self._blocks[output_index] = index
        return frame({"type": "content_block_start", "index": index, "content_block": block})

    def _next(self) -> int:
        index, self._count = self._count, self._count + 1
        return index

    def _server_call(self, item: dict[str, Any]) -> bytes:
        """A finished call of a gateway tool the client declared: its use block, then its
        result's (a tool search's call and its output: one block each)."""
        out = []
        for block in self._shown.blocks(item):
            index = self._next()
            if block["type"] in _USE_BLOCKS:  # its input in one delta, as Anthropic's
                arguments = orjson.dumps(block["input"]).decode()
                delta = {"type": "input_json_delta", "partial_json": arguments}
                block = {**block, "input": {}}
                start = {"type": "content_block_start", "index": index, "content_block": block}
                out.append(frame(start))
                out.append(frame({"type": "content_block_delta", "index": index, "delta": delta}))
            else:
                start = {"type": "content_block_start", "index": index, "content_block": block}
                out.append(frame(start))
            out.append(frame({"type": "content_block_stop", "index": index}))
        return b"".join(out)

    def _delta(self, output_index: int, delta: dict[str, Any]) -> bytes:
        index = self._blocks.get(output_index)
        if index is None:
            return b""
        return frame({"type": "content_block_delta", "index": index, "delta": delta})

    def _compaction(self, item: dict[str, Any]) -> bytes:
        """A finished compaction: its block (with its signature), its summary as one
        ``compaction_delta``, its stop."""
        index = self._next()
        delta = {"type": "compaction_delta", "content": item.get(SHOWN), "encrypted_content": None}
        block = compaction_block(item, content=False)
        return b"".join(
            [
                frame({"type": "content_block_start", "index": index, "content_block": block}),
                frame({"type": "content_block_delta", "index": index, "delta": delta}),
                frame({"type": "content_block_stop", "index": index}),
            ]
        )

    def _stop(self, output_index: int, item: dict[str, Any]) -> bytes:
        index = self._blocks.get(output_index)
        if index is None and item.get("type") == COMPACTION:
            return self._compaction(item)
        if index is None:
            if self._shown.shows(item):
                if self._results is not None:
                    self._results.add(item)
                return self._server_call(item)
            return b""
        out = b""
        streamed = self._inputs.pop(output_index, None)
        if item.get("type") == FUNCTION_CALL and streamed is not None:
            rest = streamed.finish()
            if streamed.unsaid():  # as the unstreamed answer has them
                cut = item.get("status") == "incomplete"
                rest = orjson.dumps(tool_input(str(item.get("arguments") or ""), cut)).decode()
            if rest:
                delta = {"type": "input_json_delta", "partial_json": rest}
                out = frame({"type": "content_block_delta", "index": index, "delta": delta})
        if item.get("type") == REASONING:
            thinking = thinking_of(item)
            if thinking.seal and not thinking.redacted:
                signature = {"type": "signature_delta", "signature": thinking.seal}
                out = frame({"type": "content_block_delta", "index": index, "delta": signature})
        return out + frame({"type": "content_block_stop", "index": index})


def _started(state: ResponseState) -> dict[str, Any]:
    return {
        "id": message_id(state.id),
        "type": "message",
        "role": "assistant",
        "model": state.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": encode_usage(state.prompt_usage or Usage()),
    }


def _finished(state: ResponseState, shown: Shown) -> bytes:
    if state.status in _FAILED:
        return frame(stream_error(state.error))
    delta = stop_fields(state)
    usage = message_usage(state, shown.searches_run(state))
    ending = {"type": "message_delta", "delta": delta, "usage": usage, **applied_edits(state)}
    return frame(ending) + frame({"type": "message_stop"})
