"""A translated request's errors name the fields a Chat client sent."""

from __future__ import annotations

import pytest

from stateway.protocols.chat.errors import chat_param

SENT = {"model": "m", "messages": [], "tools": [], "reasoning_effort": "high"}


@pytest.mark.parametrize(
    ("param", "named"),
    [
        ("input", "messages"),
        ("reasoning", "reasoning_effort"),
        ("tools", "tools"),
        ("model", "model"),
        (None, None),
        ("input[1].content[1].type", None),  # an item's place: not mapped to a message
        ("input[0].type", None),
        ("tools[2].type", None),  # the web search or a backend's gateway tool, say
        ("parallel_tool_calls", None),  # a default the client did not send
        ("instructions", None),
        ("previous_response_id", None),
    ],
)
def test_a_param_is_a_field_the_client_sent_or_none(param: str | None, named: str | None) -> None:
    assert chat_param(param, SENT) == named


def test_a_renamed_field_the_client_did_not_send_is_not_named() -> None:
    assert chat_param("reasoning", {"model": "m", "messages": []}) is None
