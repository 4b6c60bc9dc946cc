"""``conversation`` on ``POST /v1/responses``: an id or ``{"id": ...}``, and what it excludes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_create


def decode(**fields: Any) -> Any:
    return decode_create(orjson.dumps({"model": "m", **fields}))


def refused(**fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(**fields)
    return caught.value


def test_an_id_or_an_object_names_the_conversation() -> None:
    assert decode(input="x", conversation="conv_1").conversation_id == "conv_1"
    assert decode(input="x", conversation={"id": "conv_2"}).conversation_id == "conv_2"
    assert decode(input="x").conversation_id is None


def test_a_turn_needs_no_input_of_its_own() -> None:
    command = decode(conversation="conv_1")
    assert (command.conversation_id, command.input) == ("conv_1", [])
    assert refused().param == "input", "without a conversation there is nothing to answer"


@pytest.mark.parametrize("value", ["", {"id": ""}, {"id": 3}, {}])
def test_a_conversation_without_an_id_is_refused(value: Any) -> None:
    error = refused(input="x", conversation=value)
    assert (error.param, error.code) == ("conversation", "invalid_value")


@pytest.mark.parametrize("value", ["wa_10_972504294724", {"id": "resp_1"}, "CONV_1"])
def test_an_id_not_of_a_conversation_is_refused_as_hosted_refuses_it(value: Any) -> None:
    """Hosted answers an id of another shape with a 400 before looking it up (a client
    passing its own session id learns its mistake, rather than of a missing conversation)."""
    error = refused(input="x", conversation=value)
    assert (error.status, error.param, error.code) == (400, "conversation", "invalid_value")
    conversation_id = value["id"] if isinstance(value, dict) else value
    assert error.message == (
        f"Invalid 'conversation': '{conversation_id}'. Expected an ID that begins with 'conv'."
    )


def test_conversation_and_previous_response_id_exclude_each_other() -> None:
    error = refused(input="x", conversation="conv_1", previous_response_id="resp_1")
    assert error.code == "mutually_exclusive_parameters"
    assert "'previous_response_id' or 'conversation'" in error.message
    assert error.param is None


def test_a_turn_may_be_unstored() -> None:
    """It reads the conversation and adds nothing to it (tests/core/test_conversations)."""
    unstored = decode(input="x", conversation="conv_1", store=False)
    assert (unstored.conversation_id, unstored.store) == ("conv_1", False)
    assert decode(input="x", conversation="conv_1", store=True).store is True
