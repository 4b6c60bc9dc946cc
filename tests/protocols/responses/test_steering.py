"""Steering's wire: what a steer's input may hold, the stubs of a response's required
input, and its events numbered like the response's own."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.steering import (
    decode_steer_input,
    required_inputs,
    steer_accepted,
    steer_failed,
    steer_pending,
)
from stateway.protocols.responses.stream import encode_event_json

IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}


@pytest.mark.parametrize(
    "raw",
    [
        "go faster",
        [{"role": "user", "content": "plain"}],
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}],
        [
            {
                "role": "user",
                "content": [IMAGE, {"type": "input_file", "file_url": "https://example.com/a.pdf"}],
            }
        ],
    ],
)
def test_user_messages_of_text_image_and_file_parts_steer(raw: Any) -> None:
    items = decode_steer_input(raw)
    assert [(item["type"], item["role"]) for item in items] == [("message", "user")] * len(items)


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ("", "input"),
        ([], "input"),
        (5, "input"),
        ([{"role": "assistant", "content": "x"}], "input[0].role"),
        ([{"role": "developer", "content": "x"}], "input[0].role"),
        ([{"type": "function_call_output", "call_id": "c", "output": "x"}], "input[0]"),
        ([{"role": "user", "content": "x", "id": "msg_1"}], "input[0]"),
        ([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}], None),
        ([{"role": "user", "content": 3}], "input[0].content"),
        (["text"], "input[0]"),
        ([{"role": "user", "content": [{"type": "input_text"}]}], None),  # the item decoder's
    ],
)
def test_anything_else_is_invalid_input(raw: Any, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_steer_input(raw)
    assert caught.value.message
    if param is not None:
        assert caught.value.param == param
        assert caught.value.code == "invalid_input"


def test_required_input_stubs_name_each_open_client_call() -> None:
    output = [
        {"type": "message", "role": "assistant", "content": []},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "x"},
        {"type": "shell_call", "call_id": "c3", "action": {"commands": ["ls"]}},
        {"type": "tool_search_call", "call_id": "c4", "execution": "client", "arguments": {}},
        {"type": "tool_search_call", "call_id": "c5", "execution": "server", "arguments": {}},
        {"type": "mcp_approval_request", "id": "apr_1", "name": "t", "server_label": "s"},
        {"type": "mcp_call", "id": "mcp_1", "name": "t", "server_label": "s"},
    ]
    assert required_inputs(output) == [
        {"type": "function_call_output", "call_id": "c1", "name": "lookup"},
        {"type": "custom_tool_call_output", "call_id": "c2"},
        {"type": "shell_call_output", "call_id": "c3"},
        {"type": "tool_search_output", "call_id": "c4", "execution": "client"},
        {"type": "mcp_approval_response", "approval_request_id": "apr_1"},
    ]
    assert required_inputs(output[:1]) == []


def test_steer_events_are_numbered_by_their_place_in_the_stream() -> None:
    accepted = orjson.loads(encode_event_json(7, steer_accepted("steer_1", "resp_1")))
    assert accepted == {
        "type": "response.steer.accepted",
        "sequence_number": 7,
        "steer": {"id": "steer_1", "previous_response_id": "resp_1"},
    }
    stub = {"type": "function_call_output", "call_id": "c1", "name": "f"}
    pending = orjson.loads(encode_event_json(9, steer_pending("steer_1", "resp_1", [stub])))
    assert pending["type"] == "response.steer.pending"
    assert (pending["sequence_number"], pending["reason"]) == (9, "waiting_for_required_input")
    assert pending["required_input"] == [stub]
    failed = orjson.loads(encode_event_json(0, steer_failed("invalid_input", "no", "r", [1])))
    assert failed["error"] == {
        "code": "invalid_input",
        "message": "no",
        "type": "invalid_request_error",
    }
    assert failed["steer"] == {"input": [1], "previous_response_id": "r"}
    late = steer_failed("response_not_active", "gone", "r", "x", "steer_2")
    assert orjson.loads(encode_event_json(3, late))["steer"]["id"] == "steer_2"
