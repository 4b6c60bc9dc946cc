"""Logged payloads read back: every event a dead run's output is rebuilt from comes back
as the event it was encoded from; any other payload is None."""

from __future__ import annotations

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json

PART = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
TOKEN = {"token": "A", "logprob": -0.5, "bytes": [65], "top_logprobs": []}
ITEM = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}

READ_BACK: list[ev.Event] = [
    ev.ItemAdded(0, ITEM),
    ev.ItemDone(2, {**ITEM, "status": "completed"}),
    ev.PartAdded(0, 0, "msg_1", PART),
    ev.PartDone(0, 1, "msg_1", {"type": "refusal", "refusal": "no"}),
    ev.TextDelta(0, 0, "msg_1", "Hel", [TOKEN]),
    ev.TextDelta(0, 0, "msg_1", "lo"),
    ev.RefusalDelta(0, 1, "msg_1", "no"),
    ev.ReasoningDelta(1, 0, "rs_1", "hmm"),
    ev.SummaryPartAdded(1, 0, "rs_1"),
    ev.ArgumentsDelta(3, "fc_1", '{"a":'),
    ev.McpArgumentsDelta(4, "mcp_1", "{"),
    ev.McpArgumentsDone(4, "mcp_1", "{}"),
]


@pytest.mark.parametrize("event", READ_BACK, ids=lambda e: type(e).__name__)
def test_an_output_event_reads_back_as_itself(event: ev.Event) -> None:
    assert decode_event_json(encode_event_json(7, event)) == event


STATE = ResponseState("resp_1", "t", 1.0, "m", None, None, True, GenerationSettings())

SKIPPED: list[ev.Event] = [
    ev.ResponseCreated(STATE),
    ev.ResponseInProgress(STATE),
    ev.ResponseFinished(STATE),
    ev.TextDone(0, 0, "msg_1", "Hello"),
    ev.ArgumentsDone(3, "fc_1", "f", "{}"),
    ev.ToolProgress("response.mcp_call.in_progress", 4, "mcp_1"),
    ev.Notice("response.steer.accepted", {"steer": {"id": "s"}}),
]


@pytest.mark.parametrize("event", SKIPPED, ids=lambda e: type(e).__name__)
def test_other_events_are_none(event: ev.Event) -> None:
    assert decode_event_json(encode_event_json(7, event)) is None


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"{",
        b"null",
        b'"response.output_item.added"',
        b'{"type": 3}',
        b'{"type": {"a": 1}}',
        b'{"type": "response.output_item.added", "output_index": 0}',
        b'{"type": "response.output_item.added", "output_index": 0, "item": {"id": "a"}}',
        b'{"type": "response.output_item.done", "output_index": 0, "item": {"type": "message"}}',
        orjson.dumps(
            {
                "type": "response.output_item.added",
                "output_index": True,
                "item": {"id": "a", "type": "message"},
            }
        ),
        b'{"type": "response.output_text.delta", "output_index": 0, "content_index": 0}',
        b'{"type": "response.function_call_arguments.delta", "item_id": 1, "output_index": 0}',
    ],
)
def test_a_payload_not_shaped_as_the_encoder_writes_it_is_none(payload: bytes) -> None:
    assert decode_event_json(payload) is None
