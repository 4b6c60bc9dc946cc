"""A Chat upstream's custom tool calls read as the calls of the functions the gateway
offers custom tools as: arguments ``{"input": <raw input>}``, whole or streamed."""

from __future__ import annotations

from typing import Any

import orjson

from stateway.backends.chat_custom_calls import CustomInputs, whole_arguments
from stateway.backends.chat_reply import from_upstream_chunk, from_upstream_completion
from stateway.core.inference import Finish, ToolCallDelta

RAW = 'a "quoted"\nline\\ \u00e9'


def _chunk(call: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {"tool_calls": [call]} if call is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_whole_custom_call_has_its_name_and_input() -> None:
    call = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": RAW}}
    reply = {
        "choices": [
            {"message": {"role": "assistant", "tool_calls": [call]}, "finish_reason": "tool_calls"}
        ]
    }
    [delta, finish] = from_upstream_completion(reply)
    assert delta == ToolCallDelta(0, "call_1", "apply_patch", orjson.dumps({"input": RAW}).decode())
    assert finish == Finish("tool_calls")


def test_a_streamed_custom_call_is_closed_by_the_finish() -> None:
    custom = CustomInputs()
    opening = {"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "p", "input": ""}}
    pieces = [{"index": 0, "custom": {"input": RAW[i : i + 3]}} for i in range(0, len(RAW), 3)]
    other = {"index": 1, "id": "call_2", "type": "custom", "custom": {"name": "q", "input": "x"}}
    chunks = [
        _chunk(opening),
        *(_chunk(p) for p in pieces),
        _chunk(other),
        _chunk(None, "tool_calls"),
    ]
    deltas = [d for chunk in chunks for d in from_upstream_chunk(chunk, custom=custom)]
    assert type(deltas[-1]) is Finish
    calls = [d for d in deltas if type(d) is ToolCallDelta]
    assert [(c.index, c.call_id, c.name) for c in calls if c.name] == [
        (0, "call_1", "p"),
        (1, "call_2", "q"),
    ]
    for index, raw in ((0, RAW), (1, "x")):
        arguments = "".join(c.arguments for c in calls if c.index == index)
        assert orjson.loads(arguments) == {"input": raw}


def test_a_function_call_beside_an_empty_custom_stays_a_function_call() -> None:
    """Some proxies echo an empty ``custom`` on every function call fragment."""
    call = {"index": 0, "id": "c", "custom": {}, "function": {"name": "f", "arguments": "{}"}}
    assert from_upstream_chunk(_chunk(call), custom=CustomInputs()) == [
        ToolCallDelta(0, "c", "f", "{}")
    ]


def test_a_whole_custom_call_without_input_has_an_empty_one() -> None:
    """``input`` missing or null (a call of a tool that takes nothing): the offered
    function's ``input`` is empty, not made up."""
    for custom in (
        {"name": "ping"},
        {"name": "ping", "input": None},
        {"name": "ping", "input": ""},
    ):
        assert orjson.loads(whole_arguments(custom)) == {"input": ""}
