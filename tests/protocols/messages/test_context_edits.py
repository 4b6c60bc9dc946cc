"""Messages' clearing edits of ``context_management``: decoded into the core's edits with
Anthropic's defaults, refused in Anthropic's words, and their ``applied_edits`` (and a
count's ``original_input_tokens``) encoded as the SDK's beta types parse them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types.beta import BetaMessage, BetaMessageTokensCount, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState
from stateway.core.results import TokenCount
from stateway.protocols.messages.context_edits import (
    encode_token_count,
)
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages
from stateway.protocols.messages.encode import encode_message
from stateway.protocols.messages.stream import MessagesStream

EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)
HISTORY = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
THINKING = {"type": "enabled", "budget_tokens": 2048}
TOOLS = {"type": "clear_tool_uses_20250919"}
THOUGHTS = {"type": "clear_thinking_20251015"}
COMPACT = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 900}}


def body(*edits: Any, **fields: Any) -> bytes:
    fields = {"thinking": THINKING, **fields}
    manage = {"context_management": {"edits": list(edits)}}
    return orjson.dumps({"model": "m", "max_tokens": 4000, "messages": HISTORY, **manage, **fields})


def edits_of(*edits: Any, **fields: Any) -> list[dict[str, Any]]:
    return decode_messages(body(*edits, **fields)).settings.context_edits


def refused(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw)
    return caught.value


def test_a_tool_clearing_edit_gets_anthropics_defaults() -> None:
    assert edits_of(TOOLS) == [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 100_000},
            "keep": 3,
            "clear_at_least": 0,
            "exclude_tools": [],
            "clear_tool_inputs": False,
        }
    ]
    given = {
        **TOOLS,
        "trigger": {"type": "tool_uses", "value": 10},
        "keep": {"type": "tool_uses", "value": 0},
        "clear_at_least": {"type": "input_tokens", "value": 5000},
        "exclude_tools": ["web_search"],
        "clear_tool_inputs": ["bash"],
    }
    assert edits_of(given) == [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 10},
            "keep": 0,
            "clear_at_least": 5000,
            "exclude_tools": ["web_search"],
            "clear_tool_inputs": ["bash"],
        }
    ]


def test_a_thinking_clearing_edit_keeps_one_turn_unless_told() -> None:
    assert edits_of(THOUGHTS) == [{"type": "clear_thinking_20251015", "keep": 1}]
    turns = {**THOUGHTS, "keep": {"type": "thinking_turns", "value": 3}}
    assert edits_of(turns) == [{"type": "clear_thinking_20251015", "keep": 3}]
    for everything in ("all", {"type": "all"}):
        assert edits_of({**THOUGHTS, "keep": everything})[0]["keep"] is None
    adaptive = edits_of(THOUGHTS, thinking={"type": "adaptive"})
    assert adaptive == [{"type": "clear_thinking_20251015", "keep": 1}]


def test_edits_keep_their_order_beside_an_autocompact() -> None:
    command = decode_messages(body(THOUGHTS, TOOLS, COMPACT))
    assert [e["type"] for e in command.settings.context_edits] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
    ]
    assert command.settings.context_management[0]["compact_threshold"] == 900
    later = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 500}}
    first = decode_messages(body(COMPACT, later)).settings.context_management
    assert [entry["compact_threshold"] for entry in first] == [900]  # the first one only
    none = decode_messages(body(COMPACT))
    assert not none.settings.context_edits
    empty = decode_messages(body())
    assert (empty.settings.context_edits, empty.settings.context_management) == ([], [])


@pytest.mark.parametrize(
    ("edit", "param", "words"),
    [
        ({}, "context_management.edits.0.type", "Field required"),
        ({"type": 5}, "context_management.edits.0.type", "Input should be a valid string"),
        (
            {**TOOLS, "trigger": {"type": "messages", "value": 5}},
            "context_management.edits.0.trigger.type",
            "expected tags: 'input_tokens', 'tool_uses'",
        ),
        (
            {**TOOLS, "trigger": {"type": "input_tokens", "value": 0}},
            "context_management.edits.0.trigger.value",
            "Input should be greater than or equal to 1",
        ),
        (
            {**TOOLS, "trigger": {"type": "input_tokens", "value": True}},
            "context_management.edits.0.trigger.value",
            "Input should be a valid integer",
        ),
        (
            {**TOOLS, "keep": {"type": "tool_uses", "value": -1}},
            "context_management.edits.0.keep.value",
            "Input should be greater than or equal to 0",
        ),
        (
            {**TOOLS, "keep": {"type": "input_tokens", "value": 3}},
            "context_management.edits.0.keep.type",
            "Input should be 'tool_uses'",
        ),
        (
            {**TOOLS, "clear_at_least": {"type": "tool_uses", "value": 3}},
            "context_management.edits.0.clear_at_least.type",
            "Input should be 'input_tokens'",
        ),
        (
            {**TOOLS, "exclude_tools": "web_search"},
            "context_management.edits.0.exclude_tools",
            "Input should be a valid list",
        ),
        (
            {**TOOLS, "clear_tool_inputs": "yes"},
            "context_management.edits.0.clear_tool_inputs",
            "Input should be a valid boolean",
        ),
        (
            {**THOUGHTS, "keep": "some"},
            "context_management.edits.0.keep",
            "Input should be 'all'",
        ),
        (
            {**THOUGHTS, "keep": {"type": "thinking_turns"}},
            "context_management.edits.0.keep.value",
            "Field required",
        ),
        (
            {**THOUGHTS, "keep": {"type": "thinking_turns", "value": 0}},
            "context_management.edits.0.keep.value",
            "Input should be greater than or equal to 1",
        ),
        (
            {**THOUGHTS, "keep": {"type": "thinking_turns", "value": "2"}},
            "context_management.edits.0.keep.value",
            "Input should be a valid integer",
        ),
        (
            {**THOUGHTS, "keep": {"type": "turns", "value": 1}},
            "context_management.edits.0.keep.type",
            "expected tags: 'thinking_turns', 'all'",
        ),
        (
            {**THOUGHTS, "keep": {}},
            "context_management.edits.0.keep.type",
            "Field required",
        ),
    ],
)
def test_a_bad_edit_is_refused_naming_its_field(edit: Any, param: str, words: str) -> None:
    error = refused(body(edit))
    assert error.param == param
    assert error.message.startswith(f"{param}: ")
    assert words in error.message


@pytest.mark.parametrize(
    ("edit", "param", "words"),
    [
        (
            {**COMPACT, "trigger": {"value": 5}},
            "context_management.edits.0.trigger.type",
            "Field required",
        ),
        (
            {**COMPACT, "trigger": {"type": "tool_uses", "value": 5}},
            "context_management.edits.0.trigger.type",
            "Input should be 'input_tokens'",
        ),
        (
            {**COMPACT, "trigger": {"type": "input_tokens", "value": 0}},
            "context_management.edits.0.trigger.value",
            "Input should be greater than or equal to 1",
        ),
        (
            {**COMPACT, "trigger": {"type": "input_tokens", "value": True}},
            "context_management.edits.0.trigger.value",
            "Input should be a valid integer",
        ),
        (
            {**COMPACT, "pause_after_compaction": "yes"},
            "context_management.edits.0.pause_after_compaction",
            "Input should be a valid boolean",
        ),
        (
            {**COMPACT, "instructions": ["keep"]},
            "context_management.edits.0.instructions",
            "Input should be a valid string",
        ),
    ],
)
def test_a_bad_autocompact_edit_is_refused_alike_by_a_count(
    edit: Any, param: str, words: str
) -> None:
    """``/count_tokens`` compacts nothing, but refuses the bodies ``/v1/messages`` refuses,
    in the same words."""
    error = refused(body(edit))
    assert (error.param, error.message) == (param, f"{param}: {words}")
    counted = orjson.loads(body(edit))
    del counted["max_tokens"]
    with pytest.raises(InvalidRequest) as caught:
        decode_count_tokens(orjson.dumps(counted))
    assert (caught.value.param, caught.value.message, caught.value.code) == (
        error.param,
        error.message,
        error.code,
    )


def test_an_edit_of_a_type_not_served_is_accepted_without_effect() -> None:
    """A newer strategy (or a misspelt one) is carried, not refused: the model is then sent
    the context it would have trimmed."""
    command = decode_messages(body({"type": "clear_everything_20270101", "keep": 1}, TOOLS))
    assert [e["type"] for e in command.settings.context_edits] == ["clear_tool_uses_20250919"]
    assert command.settings.context_management == []


def test_edits_must_be_a_list() -> None:
    raw = orjson.dumps(
        {"model": "m", "max_tokens": 10, "messages": HISTORY, "context_management": {"edits": 1}}
    )
    assert refused(raw).param == "context_management.edits"


def test_thinking_clearing_needs_thinking_as_anthropic_words_it() -> None:
    for thinking in (None, {"type": "disabled"}):
        raw = orjson.dumps(
            {
                "model": "m",
                "max_tokens": 4000,
                "messages": HISTORY,
                "context_management": {"edits": [THOUGHTS]},
                **({} if thinking is None else {"thinking": thinking}),
            }
        )
        error = refused(raw)
        assert error.message == (
            "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
        )
        assert error.param == "context_management"


def test_thinking_clearing_must_come_first() -> None:
    error = refused(body(TOOLS, THOUGHTS))
    assert error.param == "context_management.edits.1"
    assert "`clear_thinking_20251015`" in error.message
    assert "first" in error.message


def test_count_tokens_takes_the_clearing_edits() -> None:
    raw = orjson.dumps(
        {
            "model": "m",
            "messages": HISTORY,
            "thinking": THINKING,
            "context_management": {"edits": [THOUGHTS, TOOLS, COMPACT]},
        }
    )
    settings = decode_count_tokens(raw).request.settings
    assert [edit["type"] for edit in settings.context_edits] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
    ]
    assert settings.context_management == []  # a count compacts nothing
    bad = orjson.dumps({"model": "m", "messages": HISTORY, "context_management": {"edits": [{}]}})
    with pytest.raises(InvalidRequest):
        decode_count_tokens(bad)


APPLIED = [
    {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": 30},
    {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 900},
]


def answered(edits: list[dict[str, Any]], applied: list[dict[str, Any]]) -> ResponseState:
    settings = GenerationSettings(context_edits=edits)
    state = ResponseState("resp_1", "t", 0.0, "m", None, None, False, settings)
    state.status = "completed"
    state.output = [
        {
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok"}],
        }
    ]
    state.applied_edits = applied
    return state


def test_the_message_says_what_was_cleared_as_the_sdk_parses_it() -> None:
    edits = decode_messages(body(THOUGHTS, TOOLS)).settings.context_edits
    message = BetaMessage.model_validate(encode_message(answered(edits, APPLIED)))
    assert message.context_management is not None
    assert [edit.model_dump() for edit in message.context_management.applied_edits] == APPLIED
    nothing = encode_message(answered(edits, []))
    assert nothing["context_management"] == {"applied_edits": []}
    assert "context_management" not in encode_message(answered([], []))


def test_the_last_message_delta_says_what_was_cleared() -> None:
    edits = decode_messages(body(TOOLS)).settings.context_edits
    state = answered(edits, APPLIED[1:])
    [delta] = [event for event in events_of(state) if event.type == "message_delta"]
    assert delta.context_management is not None
    assert [edit.model_dump() for edit in delta.context_management.applied_edits] == APPLIED[1:]
    plain = [event for event in events_of(answered([], [])) if event.type == "message_delta"]
    assert plain[0].context_management is None


def events_of(state: ResponseState) -> list[Any]:
    """A response's stream (created, then finished), parsed as the SDK parses it."""
    stream = MessagesStream()
    raw = stream.encode(ev.ResponseCreated(state)) + stream.encode(ev.ResponseFinished(state))
    return [
        EVENTS.validate_python(orjson.loads(line[6:]))
        for line in raw.split(b"\n")
        if line.startswith(b"data: ") and b'"ping"' not in line
    ]


def test_a_count_says_the_count_before_the_edits() -> None:
    edits = decode_messages(body(TOOLS)).settings.context_edits
    counted = encode_token_count(TokenCount(70, estimated=False, cleared=30), edits)
    parsed = BetaMessageTokensCount.model_validate(counted)
    assert parsed.input_tokens == 70
    assert parsed.context_management is not None
    assert parsed.context_management.original_input_tokens == 100
    assert encode_token_count(TokenCount(70, estimated=True), []) == {"input_tokens": 70}
