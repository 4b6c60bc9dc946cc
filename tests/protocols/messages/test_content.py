"""A Messages conversation's blocks as the canonical items they become, whole: each item's
id of its kind and status (a Responses upstream is sent them as they are), and the 400s
of blocks out of place, in Anthropic's words."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.reasoning import REDACTED
from stateway.protocols.messages.decode import decode_messages

USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}


def decoded(messages: list[dict[str, Any]], **fields: Any) -> list[Item]:
    raw = orjson.dumps({"model": "m", "max_tokens": 100, "messages": messages, **fields})
    return decode_messages(raw).input


def refused(messages: list[dict[str, Any]], **fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decoded(messages, **fields)
    assert caught.value.status == 400
    return caught.value


def without_id(item: Item, prefix: str) -> Item:
    """``item`` without its id, once the id is seen to be a new one of its kind."""
    assert re.fullmatch(rf"{prefix}_[0-9a-f]{{48}}", item["id"]), item["id"]
    return {key: value for key, value in item.items() if key != "id"}


def test_each_block_becomes_an_item_of_its_kind_whole() -> None:
    assistant = [
        {"type": "thinking", "thinking": "plan", "signature": "sig=="},
        {"type": "thinking", "thinking": "", "signature": "only=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "calling"},
        USE,
    ]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "sure"},
        {"role": "user", "content": "then"},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": [RESULT]},
    ]
    items = decoded(messages)
    assert [without_id(item, prefix) for item, prefix in zip(items, PREFIXES, strict=True)] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "sure"}],
            "status": "completed",
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "then"}]},
        {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "plan"}],
            "encrypted_content": "sig==",
            "status": "completed",
        },
        {  # a signature alone: no empty text to show
            "type": "reasoning",
            "summary": [],
            "content": [],
            "encrypted_content": "only==",
            "status": "completed",
        },
        {
            "type": "reasoning",
            "summary": [],
            "content": [],
            "encrypted_content": REDACTED + "opaque",
            "status": "completed",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "calling"}],
            "status": "completed",
        },
        {
            "type": "function_call",
            "call_id": "t1",
            "name": "f",
            "arguments": '{"a":1}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "t1", "output": "ok", "status": "completed"},
    ]


PREFIXES = ["msg", "msg", "msg", "rs", "rs", "rs", "msg", "fc", "fco"]
"""The id each item of :func:`test_each_block_becomes_an_item_of_its_kind_whole` is given."""


def test_a_custom_content_documents_text_blocks_join_around_its_images() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}
    text = [{"type": "text", "text": "one "}, image, {"type": "text", "text": "two"}]
    document = {"type": "document", "source": {"type": "content", "content": text}}
    [item] = decoded([{"role": "user", "content": [document]}])
    part, shown = item["content"]
    assert part["file_data"] == "data:text/plain;base64,b25lIHR3bw=="  # "one two"
    assert shown["in_document"] is True


def test_a_tool_result_answering_no_call_is_refused_whole() -> None:
    error = refused([{"role": "user", "content": [{"type": "text", "text": "see"}, RESULT]}])
    assert (error.param, error.code) == ("messages.0.content.1.tool_use_id", "tool_call_not_found")
    assert error.message == (
        "messages.0.content.1.tool_use_id: unexpected tool_use_id 't1' found in a tool_result "
        "block: each tool_result must answer a tool_use block of an earlier assistant "
        "message, once."
    )


def test_calls_left_unanswered_are_named_in_their_order() -> None:
    calls = [USE, {**USE, "id": "t2"}, {**USE, "id": "t3"}]
    ending = [{"role": "user", "content": "go"}, {"role": "assistant", "content": calls}]
    error = refused(ending)
    assert (error.param, error.code) == ("messages.1", "tool_output_missing")
    assert error.message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "t1, t2, t3. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message."
    )


def test_a_result_after_other_blocks_is_not_at_the_beginning() -> None:
    calls = [USE, {**USE, "id": "t2"}]
    late = [RESULT, {"type": "text", "text": "and"}, {**RESULT, "tool_use_id": "t2"}]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": late},
    ]
    error = refused(messages)
    assert (error.param, error.code) == ("messages.2.content.0", "tool_output_missing")
    assert error.message == (
        "messages.2.content.0: Did not find 1 `tool_result` block(s) at the beginning of this "
        "message. Messages following `tool_use` blocks must begin with a matching number of "
        "`tool_result` blocks."
    )


@pytest.mark.parametrize(
    ("role", "block", "words"),
    [
        ("user", USE, "a 'tool_use' block cannot appear in a user message."),
        ("system", RESULT, "a 'tool_result' block cannot appear in a system message."),
        ("assistant", RESULT, "a 'tool_result' block cannot appear in an assistant message."),
    ],
)
def test_a_block_its_role_cannot_hold_is_refused_whole(
    role: str, block: dict[str, Any], words: str
) -> None:
    messages = [{"role": "user", "content": "go"}, {"role": role, "content": [block]}]
    error = refused(messages)
    assert error.param == "messages.1.content.0.type"
    assert error.message == f"messages.1.content.0.type: {words}"


def test_a_thread_turn_may_follow_its_results_with_more() -> None:
    """The results the new turn's first message leads with answer the thread's calls; what
    follows them is the turn's text."""
    first = [RESULT, {"type": "text", "text": "and now"}]
    thread = {"type": "continue", "previous_message_id": "msg_abc"}
    output, text = decoded([{"role": "user", "content": first}], thread=thread)
    assert (output["type"], output["call_id"]) == ("function_call_output", "t1")
    assert text["content"] == [{"type": "input_text", "text": "and now"}]
