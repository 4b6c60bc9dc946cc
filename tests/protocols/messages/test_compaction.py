"""Messages compaction: requests and blocks sent back decoded, the block encoded (checked
with the SDK's beta types), and each refusal's ``error.details.error_code``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.core.compaction.prompt import STANDALONE_SUMMARY_PROMPT
from stateway.core.compaction.sealed import CONTENT_MISMATCH, SIGNATURE_INVALID
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState
from stateway.core.usage import Iteration, Usage
from stateway.protocols.messages import compaction
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages
from stateway.protocols.messages.encode import encode_message
from stateway.protocols.messages.errors import COMPACTION_CODES, encode_error
from stateway.protocols.messages.stream import MessagesStream

EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)
BLOCK = {"type": "compaction", "content": "the summary", "signature": "sw1.seal"}
HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def body(**fields: Any) -> bytes:
    return orjson.dumps({"model": "m", "max_tokens": 100, "messages": HISTORY, **fields})


def refused(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw)
    return caught.value


def test_a_compaction_request_is_the_conversation_and_a_trigger() -> None:
    command = decode_messages(body(compaction={"type": "summarize"}))
    assert [item["type"] for item in command.input] == ["message", "message", "compaction_trigger"]
    assert command.settings.summary_prompt == STANDALONE_SUMMARY_PROMPT
    assert command.settings.summary_shown is True
    asked = decode_messages(body(compaction={"type": "summarize", "instructions": "be short"}))
    assert asked.settings.summary_prompt == "be short"
    blank = decode_messages(body(compaction={"type": "summarize", "instructions": " \n"}))
    assert blank.settings.summary_prompt == STANDALONE_SUMMARY_PROMPT


def test_a_block_sent_back_becomes_a_compaction_item_after_the_system_text() -> None:
    messages = [{"role": "user", "content": [BLOCK, {"type": "text", "text": "go on"}]}]
    command = decode_messages(body(system="rules", messages=messages))
    system, item, turn = command.input
    assert system["role"] == "system"
    assert (item["type"], item["encrypted_content"], item["content"]) == (
        "compaction",
        "sw1.seal",
        "the summary",
    )
    assert turn["content"] == [{"type": "input_text", "text": "go on"}]
    assert "cache_control" not in item
    marked = [{"role": "user", "content": [{**BLOCK, "cache_control": {"type": "ephemeral"}}]}]
    assert decode_messages(body(messages=marked)).input[0]["cache_control"] == {"type": "ephemeral"}
    alone = [{"role": "assistant", "content": [BLOCK]}, {"role": "user", "content": "next"}]
    assert [i["type"] for i in decode_messages(body(messages=alone)).input] == [
        "compaction",
        "message",
    ]
    counted = decode_count_tokens(body(messages=alone, compaction={"type": "summarize"}))
    assert [i["type"] for i in counted.request.input] == ["compaction", "message"]


def test_a_block_without_content_is_dropped_wherever_it_is() -> None:
    failed = {"type": "compaction", "content": None}
    messages = [*HISTORY, {"role": "user", "content": [failed, {"type": "text", "text": "x"}]}]
    command = decode_messages(body(messages=messages))
    assert [item["type"] for item in command.input] == ["message"] * 3


def test_blocks_without_content_before_the_block_leave_it_first() -> None:
    failed = {"type": "compaction", "content": None}
    text = {"type": "text", "text": "go on"}
    same_message = [{"role": "user", "content": [failed, BLOCK, text]}]
    earlier_message = [
        {"role": "assistant", "content": [failed]},
        {"role": "user", "content": [BLOCK, text]},
    ]
    for messages in (same_message, earlier_message):
        command = decode_messages(body(messages=messages))
        assert [item["type"] for item in command.input] == ["compaction", "message"]


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"messages": [*HISTORY, {"role": "user", "content": [BLOCK]}]}, "misplaced", "2.0"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, BLOCK]}]},
            "misplaced",
            "0.1",
        ),
        ({"messages": [{"role": "system", "content": [BLOCK]}, *HISTORY]}, "misplaced", "0.0"),
        ({"messages": [{"role": "user", "content": [BLOCK, BLOCK]}]}, "ambiguous", "0.1"),
        (
            {
                "messages": [{"role": "user", "content": [{"type": "compaction"}]}],
                "compaction": {"type": "summarize"},
            },
            "nothing_to_summarize",
            None,
        ),
        (
            {
                "messages": [
                    HISTORY[0],
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    },
                ],
                "compaction": {"type": "summarize"},
            },
            "incomplete_turn",
            None,
        ),
    ],
)
def test_refusals_carry_their_code(fields: dict[str, Any], code: str, param: str | None) -> None:
    error = refused(body(**fields))
    assert error.code == f"compaction_{'block_' if param else ''}{code}"
    if param is not None:
        assert error.param == f"messages.{param.replace('.', '.content.')}"
    wire = encode_error(error)["error"]
    assert wire["details"] == {"error_code": error.code}
    assert wire["type"] == "invalid_request_error"


def test_a_block_in_the_system_field_is_misplaced() -> None:
    error = refused(body(system=[{"type": "text", "text": "x"}, BLOCK]))
    assert (error.code, error.param) == (compaction.MISPLACED, "system.1")


def test_compaction_with_context_management_or_another_type_is_refused() -> None:
    both = refused(body(compaction={"type": "summarize"}, context_management={"edits": []}))
    assert (both.param, both.code) == ("compaction", "invalid_value")
    assert "details" not in encode_error(both)["error"]
    other = refused(body(compaction={"type": "other"}))
    assert other.param == "compaction.type"


def test_the_cores_seal_errors_are_worded_for_a_block() -> None:
    assert {SIGNATURE_INVALID, CONTENT_MISMATCH, compaction.MISPLACED} <= COMPACTION_CODES
    for code in (SIGNATURE_INVALID, CONTENT_MISMATCH):
        wire = encode_error(InvalidRequest("x", param="input[0].encrypted_content", code=code))
        assert wire["error"]["message"].startswith("messages: ")
        assert "`compaction` block" in wire["error"]["message"]
        assert wire["error"]["details"] == {"error_code": code}
    misplaced = InvalidRequest("the core's words", param="messages.1", code=compaction.MISPLACED)
    assert encode_error(misplaced) == {  # a code with no words of its own keeps the core's
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "the core's words",
            "details": {"error_code": compaction.MISPLACED},
        },
    }


ITEM = {
    "id": "cmp_1",
    "type": "compaction",
    "encrypted_content": "sw1.seal",
    "content": "the summary",
}


def compacted() -> ResponseState:
    return ResponseState(
        id="resp_1",
        tenant_id="t",
        created_at=0.0,
        model="m",
        instructions=None,
        previous_response_id=None,
        store=False,
        settings=GenerationSettings(summary_shown=True),
        status="completed",
        output=[dict(ITEM)],
        usage=Usage(10, 4),
    )


def test_a_compaction_answers_with_its_block_alone() -> None:
    message = BetaMessage.model_validate(encode_message(compacted()))
    assert message.stop_reason == "compaction"
    [block] = message.content
    assert block.type == "compaction"
    assert (block.content, block.signature) == ("the summary", "sw1.seal")


def test_an_answer_cut_short_after_its_compaction_says_why() -> None:
    """An autocompact's answer that ended before any output (out of tokens, or an
    Anthropic upstream's own stop) is no pause for the compaction: the client must not
    take it for one and send the conversation again."""
    cut = compacted()
    cut.status, cut.incomplete_reason = "incomplete", "max_output_tokens"
    assert encode_message(cut)["stop_reason"] == "max_tokens"
    cut.stop_reason = "model_context_window_exceeded"
    assert encode_message(cut)["stop_reason"] == "model_context_window_exceeded"


def test_a_compaction_streams_its_block_then_its_summary() -> None:
    state = compacted()
    stream = MessagesStream()
    events = [
        ev.ResponseCreated(state),
        ev.ItemAdded(0, {"id": "cmp_1", "type": "compaction"}),
        ev.Compacting(0, "cmp_1"),
        ev.ItemDone(0, dict(ITEM)),
        ev.ResponseFinished(state),
    ]
    raw = b"".join(stream.encode(event) for event in events)
    frames = [
        EVENTS.validate_python(orjson.loads(line[6:]))
        for line in raw.split(b"\n")
        if line.startswith(b"data: ") and b'"ping"' not in line
    ]
    assert [frame.type for frame in frames] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start, delta = frames[1], frames[2]
    assert start.content_block.type == "compaction"
    assert start.content_block.signature == "sw1.seal"
    assert (delta.delta.type, delta.delta.content) == ("compaction_delta", "the summary")
    assert frames[4].delta.stop_reason == "compaction"


def test_the_autocompact_edit_is_the_gateways_compaction_threshold() -> None:
    edit = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 5000},
        "pause_after_compaction": True,
        "instructions": "keep names",
    }
    command = decode_messages(body(context_management={"edits": [edit]}))
    assert command.settings.context_management == [
        {"type": "compaction", "compact_threshold": 5000, "pause_after_compaction": True}
    ]
    assert command.settings.summary_prompt == STANDALONE_SUMMARY_PROMPT + "\n\nkeep names"
    default = decode_messages(body(context_management={"edits": [{"type": "compact_20260112"}]}))
    assert default.settings.context_management[0]["compact_threshold"] is None
    clearing = {"type": "clear_tool_uses_20250919"}  # the gateway's context editing instead
    others = decode_messages(body(context_management={"edits": [clearing]}))
    assert others.settings.context_management == []
    bad = refused(body(context_management={"edits": [{**edit, "trigger": {"value": 5}}]}))
    assert bad.param == "context_management.edits.0.trigger.type"
    flag = {"type": "input_tokens", "value": True}  # a boolean is no token count
    assert refused(body(context_management={"edits": [{**edit, "trigger": flag}]})).param == (
        "context_management.edits.0.trigger.value"
    )
    worded = refused(body(context_management={"edits": [{**edit, "instructions": ["keep"]}]}))
    assert (worded.param, worded.code) == (
        "context_management.edits.0.instructions",
        "invalid_type",
    )


def frames_of(state: ResponseState, items: list[dict[str, Any]]) -> list[Any]:
    """The stream of a response that output ``items`` (each added, then done), parsed as
    the SDK parses it (pings left out)."""
    stream = MessagesStream()
    events: list[ev.Event] = [ev.ResponseCreated(state)]
    for index, item in enumerate(items):
        events += [ev.ItemAdded(index, {"type": item["type"]}), ev.ItemDone(index, item)]
    raw = b"".join(stream.encode(event) for event in [*events, ev.ResponseFinished(state)])
    return [
        EVENTS.validate_python(orjson.loads(line[6:]))
        for line in raw.split(b"\n")
        if line.startswith(b"data: ") and b'"ping"' not in line
    ]


def autocompacted(answer: list[dict[str, Any]]) -> ResponseState:
    """A response that compacted (10 tokens in, 4 out), then sampled ``answer`` (5 in, 1
    out): as the loop leaves it."""
    state = compacted()
    state.output += answer
    state.usage = Usage(15, 5)
    state.iterations = [Iteration("compaction", Usage(10, 4)), Iteration("message", Usage(5, 1))]
    return state


ANSWER = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "hi"}],
}


def test_an_empty_answer_after_an_autocompact_stops_as_the_model_did() -> None:
    """``stop_reason: "compaction"`` is for a response that stopped after its compaction
    block (a compaction request, ``pause_after_compaction``); an answer sampled after it
    that holds nothing ends as the model ended it."""
    empty = autocompacted([])
    assert encode_message(empty)["stop_reason"] == "end_turn"
    assert frames_of(empty, [dict(ITEM)])[-2].delta.stop_reason == "end_turn"
    paused = compacted()
    paused.iterations = [Iteration("compaction", Usage(10, 4))]
    assert encode_message(paused)["stop_reason"] == "compaction"


def test_a_compactions_usage_is_its_iteration_apart_from_the_answers() -> None:
    """As Anthropic counts it: the top-level usage is the answer's (the sampling
    iterations'), and ``usage.iterations`` lists the compaction first, then the answer."""
    state = autocompacted([ANSWER])
    message = BetaMessage.model_validate(encode_message(state))
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 1)
    iterations = message.usage.iterations
    assert iterations is not None
    assert [(i.type, i.input_tokens, i.output_tokens) for i in iterations] == [
        ("compaction", 10, 4),
        ("message", 5, 1),
    ]
    assert all(i.cache_read_input_tokens == i.cache_creation_input_tokens == 0 for i in iterations)
    delta = frames_of(state, [dict(ITEM), ANSWER])[-2]
    assert delta.type == "message_delta"
    assert delta.usage.model_dump(exclude_none=True) == message.usage.model_dump(exclude_none=True)
    alone = compacted()  # a compaction request: nothing sampled after its block
    alone.iterations = [Iteration("compaction", Usage(10, 4))]
    usage = BetaMessage.model_validate(encode_message(alone)).usage
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
    assert [i.type for i in usage.iterations or []] == ["compaction"]


def test_an_answer_without_a_compaction_has_no_iterations() -> None:
    state = autocompacted([ANSWER])
    state.output, state.iterations = [ANSWER], [Iteration("message", Usage(5, 1))]
    assert "iterations" not in encode_message(state)["usage"]
    assert frames_of(state, [ANSWER])[-2].usage.iterations is None


def test_the_searches_an_answer_after_a_compaction_ran_are_counted() -> None:
    search = {
        "id": "ws_abc",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": []},
    }
    state = autocompacted([search, ANSWER])
    state.settings = GenerationSettings(summary_shown=True, tools=[{"type": "web_search"}])
    usage = encode_message(state)["usage"]
    assert usage["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert [i["type"] for i in usage["iterations"]] == ["compaction", "message"]
