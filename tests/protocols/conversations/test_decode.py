"""Conversations wire -> commands: bodies, item caps, metadata bounds, list parameters."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.conversations.commands import (
    AddConversationItems,
    CreateConversation,
    ListConversationItems,
    UpdateConversation,
)
from stateway.core.errors import InvalidRequest
from stateway.protocols.conversations.decode import (
    MAX_ITEMS,
    decode_add_items,
    decode_create_conversation,
    decode_list_items,
    decode_update_conversation,
)
from stateway.protocols.input_parts import part_limit
from stateway.protocols.responses.decode import decode_create


def body(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_create_with_nothing_is_an_empty_conversation() -> None:
    assert decode_create_conversation(b"{}") == CreateConversation([], {})
    assert decode_create_conversation(body(items=None, metadata=None)) == CreateConversation()


def test_items_are_normalized_as_responses_input() -> None:
    command = decode_create_conversation(body(items=[user("hi")], metadata={"k": "v"}))
    [item] = command.items
    assert item["type"] == "message"
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert item["status"] == "completed"
    assert command.metadata == {"k": "v"}


def test_an_item_error_names_its_place_in_items() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_add_items("conv_1", body(items=[user("ok"), {"role": "robot", "content": "x"}]))
    assert caught.value.param == "items[1].role"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function"}, "items[1].tools[0].name"),
        ({"type": "namespace", "name": "n", "tools": "x"}, "items[1].tools[0].tools"),
        (
            {"type": "mcp", "server_label": "docs", "allowed_tools": "add"},
            "items[1].tools[0].allowed_tools",
        ),
    ],
)
def test_a_search_outputs_tools_are_checked_as_a_responses_input_checks_them(
    tool: dict[str, Any], param: str
) -> None:
    """Every later response of the conversation offers the tools its search outputs load:
    one that is no tool is refused as it is added (it made each of them a 500), as is a
    malformed ``allowed_tools`` (which loaded all of a server's tools)."""
    call = {"type": "tool_search_call", "call_id": "c", "execution": "client", "arguments": {}}
    output = {"type": "tool_search_output", "call_id": "c", "execution": "client"}
    raw = body(items=[call, {**output, "tools": [tool]}])
    for decode in (decode_create_conversation, lambda raw: decode_add_items("conv_1", raw)):
        with pytest.raises(InvalidRequest) as caught:
            decode(raw)
        assert caught.value.param == param


@pytest.mark.parametrize("decode", [decode_create_conversation, decode_add_items])
def test_more_than_twenty_items_are_refused(decode: Any) -> None:
    raw = body(items=[user(str(n)) for n in range(MAX_ITEMS + 1)])
    with pytest.raises(InvalidRequest) as caught:
        decode(raw) if decode is decode_create_conversation else decode("conv_1", raw)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "items", "array_above_max_length")
    fits = body(items=[user(str(n)) for n in range(MAX_ITEMS)])
    assert len(decode_add_items("conv_1", fits).items) == MAX_ITEMS


@pytest.mark.parametrize("decode", [decode_create_conversation, decode_add_items])
def test_more_than_ten_content_parts_an_item_are_refused(decode: Any) -> None:
    """The content-parts bound of a response create holds for the items a conversation is
    given too (:mod:`~stateway.protocols.input_parts`): twenty items a request, so two
    hundred parts, a message's content's and a tool output's counted."""
    most = part_limit(MAX_ITEMS)
    text = {"type": "input_text", "text": "x"}
    output = {"type": "function_call_output", "call_id": "c", "output": [text]}
    over = body(items=[{"role": "user", "content": [text] * most}, output])
    with pytest.raises(InvalidRequest) as caught:
        decode(over) if decode is decode_create_conversation else decode("conv_1", over)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "items", "array_above_max_length")
    assert f"{most + 1} content parts" in str(error)
    fits = body(items=[{"role": "user", "content": [text] * most}])
    assert len(decode_add_items("conv_1", fits).items) == 1


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        (b"{}", "items", "missing_required_parameter"),
        (body(items=[]), "items", "empty_array"),
        (body(items="hello"), "items", "invalid_type"),
        (body(items=["hello"]), "items", "invalid_type"),
        (b"[]", None, "invalid_type"),
        (b"{nope", None, "invalid_json"),
    ],
)
def test_bad_item_batches(raw: bytes, param: str | None, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_add_items("conv_1", raw)
    assert (caught.value.param, caught.value.code) == (param, code)


def test_add_items_keeps_the_conversation() -> None:
    command = decode_add_items("conv_9", body(items=[user("x")]))
    assert isinstance(command, AddConversationItems)
    assert command.conversation_id == "conv_9"


@pytest.mark.parametrize(
    ("metadata", "param", "code"),
    [
        ({f"k{n}": "v" for n in range(17)}, "metadata", "object_above_max_properties"),
        ({"k" * 65: "v"}, "metadata." + "k" * 65, "property_name_above_max_length"),
        ({"k": "v" * 513}, "metadata.k", "string_above_max_length"),
        ({"k": 1}, "metadata.k", "invalid_type"),
        (["k"], "metadata", "invalid_type"),
    ],
)
def test_metadata_bounds(metadata: Any, param: str, code: str) -> None:
    for decode in (
        lambda raw: decode_create_conversation(raw),
        lambda raw: decode_update_conversation("conv_1", raw),
    ):
        with pytest.raises(InvalidRequest) as caught:
            decode(body(metadata=metadata))
        assert (caught.value.param, caught.value.code) == (param, code)


def test_metadata_at_its_bounds_is_accepted() -> None:
    metadata = {f"{n:02d}" + "k" * 62: "v" * 512 for n in range(16)}
    assert decode_create_conversation(body(metadata=metadata)).metadata == metadata


def test_create_takes_a_safety_identifier_checked_as_a_response_create_checks_it() -> None:
    """The SDK's ``conversations.create`` param: no model is called, so nothing is sent on,
    but a value a response create refuses is refused here too, in the same words."""
    for accepted in ("sid", "s" * 128, None):
        assert decode_create_conversation(body(safety_identifier=accepted)) == CreateConversation()
    for bad in ("s" * 129, 7, ["sid"]):
        with pytest.raises(InvalidRequest) as here:
            decode_create_conversation(body(safety_identifier=bad))
        with pytest.raises(InvalidRequest) as on_create:
            decode_create(body(model="m", input="hi", safety_identifier=bad))
        assert (here.value.message, here.value.param, here.value.code) == (
            on_create.value.message,
            on_create.value.param,
            on_create.value.code,
        )
    with pytest.raises(InvalidRequest) as too_long:
        decode_create_conversation(body(safety_identifier="s" * 129))
    assert (too_long.value.param, too_long.value.code) == (
        "safety_identifier",
        "string_above_max_length",
    )


def test_update_replaces_metadata_and_needs_it() -> None:
    assert decode_update_conversation("c", body(metadata={"a": "b"})) == UpdateConversation(
        "c", {"a": "b"}
    )
    assert decode_update_conversation("c", body(metadata=None)).metadata == {}
    with pytest.raises(InvalidRequest) as caught:
        decode_update_conversation("c", b"{}")
    assert caught.value.code == "missing_required_parameter"


def test_list_parameters() -> None:
    assert decode_list_items("c", {}) == ListConversationItems("c", None, 20, "desc")
    query = {"after": "msg_1", "limit": "100", "order": "asc", "include": "x"}
    assert decode_list_items("c", query) == ListConversationItems("c", "msg_1", 100, "asc")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"limit": "0"}, "integer_below_min_value"),
        ({"limit": "101"}, "integer_above_max_value"),
        ({"limit": "ten"}, "invalid_type"),
        ({"order": "up"}, "invalid_value"),
    ],
)
def test_bad_list_parameters(query: dict[str, str], code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_list_items("c", query)
    assert caught.value.code == code
    assert caught.value.param in query


@pytest.mark.parametrize(
    ("query", "message", "code"),
    [
        (
            {"limit": "-1"},
            "Invalid 'limit': integer below minimum value. Expected a value >= 1, but got -1 "
            "instead.",
            "integer_below_min_value",
        ),
        (
            {"limit": "ten"},
            "Invalid type for 'limit': expected an integer, but got a string instead.",
            "invalid_type",
        ),
        (
            {"order": "up"},
            "Invalid value: 'up'. Supported values are: 'asc' and 'desc'.",
            "invalid_value",
        ),
    ],
)
def test_list_parameters_are_refused_in_hosted_words(
    query: dict[str, str], message: str, code: str
) -> None:
    """As a bad value of a body field is refused: a negative ``limit`` is below its
    bound (not "not an integer"), a word is not an integer, ``order`` lists its values."""
    with pytest.raises(InvalidRequest) as caught:
        decode_list_items("c", query)
    assert (caught.value.message, caught.value.code) == (message, code)
