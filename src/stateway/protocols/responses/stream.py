"""Canonical events -> Responses stream events: their payloads, SSE frames and JSON.

A run's events become the wire's ``response.*`` events, each numbered by its place in the
run's log; :func:`encode_sse` frames one, :func:`encode_sse_batch` those logged together,
and :func:`encode_event_json` writes one as a background run's log keeps it
(:func:`encode_sse_payload` frames that as it is); :func:`encode_sse_error` is the error
event ending a stream the gateway cut off. The Response object a lifecycle event carries is
:mod:`~stateway.protocols.responses.encode`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from stateway.core import events as ev
from stateway.core.errors import GatewayError
from stateway.core.items import Item
from stateway.core.response import ResponseState
from stateway.protocols.responses.encode import encode_response

_TERMINAL_TYPES = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.failed",
}


def encode_event(seq: int, event: ev.Event) -> dict[str, Any]:
    """The wire payload of one stream event, ``sequence_number`` = its place in the log.
    The cases are tried in order, a class check each: the deltas and a plain answer's
    lifecycle events, most of every stream, come first."""
    match event:
        case ev.TextDelta():
            return _text_delta(seq, event)
        case ev.ResponseCreated():
            # a background response is created queued (hosted: then ``response.queued``)
            queued = event.response.background
            return _response_event("response.created", seq, event.response, queued=queued)
        case ev.ResponseInProgress():
            return _response_event("response.in_progress", seq, event.response)
        case ev.ItemAdded():
            return _item_event("response.output_item.added", seq, event.output_index, event.item)
        case ev.PartAdded():
            return _part_event("response.content_part.added", seq, event, part=event.part)
        case ev.TextDone():
            return _part_event(
                "response.output_text.done",
                seq,
                event,
                text=event.text,
                logprobs=event.logprobs or [],
            )
        case ev.PartDone():
            return _part_event("response.content_part.done", seq, event, part=event.part)
        case ev.ItemDone():
            return _item_event("response.output_item.done", seq, event.output_index, event.item)
        case ev.ResponseFinished():
            kind = _TERMINAL_TYPES.get(event.response.status, "response.failed")
            return _response_event(kind, seq, event.response, snapshot=False)
        case ev.ReasoningDelta():
            return _part_event("response.reasoning_text.delta", seq, event, delta=event.delta)
        case ev.RefusalDelta():
            return _part_event("response.refusal.delta", seq, event, delta=event.delta)
        case ev.RefusalDone():
            return _part_event("response.refusal.done", seq, event, refusal=event.refusal)
        case ev.ArgumentsDelta():
            return {
                "type": "response.function_call_arguments.delta",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "delta": event.delta,
            }
        case ev.AnnotationAdded():
            return _part_event(
                "response.output_text.annotation.added",
                seq,
                event,
                annotation_index=event.annotation_index,
                annotation=event.annotation,
            )
        case ev.ReasoningDone():
            return _part_event("response.reasoning_text.done", seq, event, text=event.text)
        case ev.SummaryPartAdded():
            part = {"type": "summary_text", "text": ""}
            return _summary_event("response.reasoning_summary_part.added", seq, event, part=part)
        case ev.SummaryTextDelta():
            kind = "response.reasoning_summary_text.delta"
            return _summary_event(kind, seq, event, delta=event.delta)
        case ev.SummaryTextDone():
            kind = "response.reasoning_summary_text.done"
            return _summary_event(kind, seq, event, text=event.text)
        case ev.SummaryPartDone():
            part = {"type": "summary_text", "text": event.text}
            return _summary_event("response.reasoning_summary_part.done", seq, event, part=part)
        case ev.Compacting():
            return {
                "type": "response.compaction.compacting",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
            }
        case ev.ArgumentsDone():
            return {
                "type": "response.function_call_arguments.done",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "name": event.name,
                "arguments": event.arguments,
            }
        case ev.CustomInputDelta():
            return {
                "type": "response.custom_tool_call_input.delta",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "delta": event.delta,
            }
        case ev.CustomInputDone():
            return {
                "type": "response.custom_tool_call_input.done",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "input": event.input,
            }
        case ev.ToolProgress():
            return {
                "type": event.kind,
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
            }
        case ev.McpArgumentsDelta():
            return {
                "type": "response.mcp_call_arguments.delta",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "delta": event.delta,
            }
        case ev.McpArgumentsDone():
            return {
                "type": "response.mcp_call_arguments.done",
                "sequence_number": seq,
                "item_id": event.item_id,
                "output_index": event.output_index,
                "arguments": event.arguments,
            }
        case ev.Notice():
            return {"type": event.type, "sequence_number": seq, **event.fields}
        case ev.ResponseQueued():
            return _response_event("response.queued", seq, event.response, queued=True)


def _text_delta(seq: int, event: ev.TextDelta) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "sequence_number": seq,
        "item_id": event.item_id,
        "output_index": event.output_index,
        "content_index": event.content_index,
        "delta": event.delta,
        "logprobs": event.logprobs or [],
    }


_TEXT_DELTA_HEAD = b"event: response.output_text.delta\ndata: "


def encode_sse(seq: int, event: ev.Event) -> bytes:
    """One SSE frame: ``event:`` line, one-line JSON ``data:``, blank line, LF only. A
    text delta, most of a stream's frames, has its head ready."""
    if type(event) is ev.TextDelta:
        return _TEXT_DELTA_HEAD + orjson.dumps(_text_delta(seq, event)) + b"\n\n"
    return _frame(encode_event(seq, event))


def _frame(payload: dict[str, Any]) -> bytes:
    kind: str = payload["type"]
    return b"".join((b"event: ", kind.encode(), b"\ndata: ", orjson.dumps(payload), b"\n\n"))


def encode_sse_batch(first: int, events: Sequence[ev.Event]) -> bytes:
    """The SSE frames of events logged together, numbered from ``first``: byte for byte
    :func:`encode_sse`'s of each. A run's announcement, ``response.created`` then
    ``response.in_progress`` of the same state (emitted together: ``core/run_row.py``),
    renders and serializes its snapshot once (an ``orjson.Fragment`` in both payloads):
    encoded in one go, nothing runs between them to change it. (A background run's
    announcement, queued, is its journal's: :func:`encode_event_json`, event by event.)"""
    if len(events) == 1:
        return encode_sse(first, events[0])
    frames: list[bytes] = []
    announced: tuple[ResponseState, orjson.Fragment] | None = None
    for seq, event in enumerate(events, first):
        match event:
            case ev.ResponseCreated() | ev.ResponseInProgress() if not event.response.background:
                state = event.response
                if announced is None or announced[0] is not state:
                    snapshot = orjson.dumps(encode_response(state, snapshot=True))
                    announced = (state, orjson.Fragment(snapshot))
                created = isinstance(event, ev.ResponseCreated)
                kind = "response.created" if created else "response.in_progress"
                frames.append(_frame(_response_payload(kind, seq, announced[1])))
            case _:
                frames.append(encode_sse(seq, event))
    return b"".join(frames)


def encode_event_json(seq: int, event: ev.Event) -> bytes:
    """The JSON of :func:`encode_event`: the wire form of background runs' event logs, kept
    and replayed as it is (:func:`encode_sse_payload` frames it as :func:`encode_sse` would).

    Copied to a bytes object of its own size: ``orjson.dumps`` returns one that keeps the
    buffer it was written into (~4 KiB however short the JSON), and a journal keeps every
    payload of its run, so a WebSocket response's log of 60,000 deltas held ~240 MB
    instead of ~10 MB."""
    return bytes(memoryview(orjson.dumps(encode_event(seq, event))))


_TYPE_PREFIX = b'{"type":"'


def encode_sse_payload(payload: bytes) -> bytes:
    """The SSE frame of an event's JSON from :func:`encode_event_json`, byte for byte what
    :func:`encode_sse` makes of the event. Its ``type`` is read from the JSON's start: every
    payload begins with it, and no event type holds a quote."""
    if payload.startswith(_TYPE_PREFIX):
        kind = payload[len(_TYPE_PREFIX) : payload.index(b'"', len(_TYPE_PREFIX))]
    else:  # not written by this encoder: read it properly
        kind = str(orjson.loads(payload)["type"]).encode()
    return b"event: " + kind + b"\ndata: " + payload + b"\n\n"


def encode_sse_error(error: GatewayError, seq: int) -> bytes:
    """The ``error`` event ending a stream the gateway cut off (its credential revoked or
    expired while it streamed, a watched response deleted), as the Responses API's: its
    ``code``, ``message`` and ``param`` both at its top level, as the API reference and
    the SDK's ``ResponseErrorEvent`` have them, and in an ``error`` object with its
    ``type``, as hosted sends them (and the Open Responses spec has them), so a client
    reads them either way; and the stream's next sequence number (``seq``), as every
    event's. (The ``openai`` SDK raises the nested error as an ``APIError``, as it does
    hosted's.)"""
    payload = {
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": error.param,
        "error": error.to_dict(),
        "sequence_number": seq,
    }
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


def _item_event(kind: str, seq: int, output_index: int, item: Item) -> dict[str, Any]:
    return {"type": kind, "sequence_number": seq, "output_index": output_index, "item": item}


def _part_event(kind: str, seq: int, event: Any, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sequence_number": seq,
        "item_id": event.item_id,
        "output_index": event.output_index,
        "content_index": event.content_index,
        **fields,
    }


def _summary_event(kind: str, seq: int, event: Any, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sequence_number": seq,
        "item_id": event.item_id,
        "output_index": event.output_index,
        "summary_index": event.summary_index,
        **fields,
    }


def _response_event(
    kind: str, seq: int, state: ResponseState, *, snapshot: bool = True, queued: bool = False
) -> dict[str, Any]:
    return _response_payload(kind, seq, encode_response(state, snapshot=snapshot, queued=queued))


def _response_payload(kind: str, seq: int, response: object) -> dict[str, Any]:
    """A lifecycle event's payload around ``response``: its object, or its JSON already
    serialized (an ``orjson.Fragment``, written as it is)."""
    return {"type": kind, "sequence_number": seq, "response": response}
