"""A translated request's errors name the fields a Chat client sent."""

from __future__ import annotations

import pytest

from stateway.core.errors import InvalidRequest, NoSearchProvider
from stateway.protocols.chat.errors import chat_error, chat_param

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


@pytest.mark.parametrize(
    ("sent", "named"),
    [
        ({"max_completion_tokens": 9}, "max_completion_tokens"),
        ({"max_tokens": 9}, "max_tokens"),
        ({"max_completion_tokens": 9, "max_tokens": 7}, "max_completion_tokens"),  # it wins
        ({}, None),
    ],
)
def test_the_output_limit_is_the_chat_field_that_set_it(
    sent: dict[str, int], named: str | None
) -> None:
    """``max_output_tokens`` (an upstream's refusal of more output than its window holds,
    say) is the field the client set it with: ``max_completion_tokens``, else the older
    ``max_tokens``."""
    assert chat_param("max_output_tokens", {**SENT, **sent}) == named


def test_a_renamed_field_the_client_did_not_send_is_not_named() -> None:
    assert chat_param("reasoning", {"model": "m", "messages": []}) is None


def test_a_web_search_asked_for_with_no_provider_is_refused_in_chats_words() -> None:
    """``web_search_options`` became the core's web search tool: the refusal names the
    field the client sent, and offers no declaration only the Responses API has."""
    error = NoSearchProvider("web_search", param="tools[0]")
    assert chat_error(error, {**SENT, "web_search_options": {}}) == {
        "message": "'web_search_options' asks for a web search, which needs a web search "
        "provider, and this gateway has none configured: set STATEWAY_WEB_SEARCH_PROVIDER "
        "(searxng, brave or tavily) where it runs, or leave 'web_search_options' out.",
        "type": "invalid_request_error",
        "param": "web_search_options",
        "code": "unsupported_tool_type",
    }


def test_a_web_search_the_client_did_not_ask_for_keeps_the_cores_words() -> None:
    """A route's gateway web search, say: no field of the client's to name."""
    error = NoSearchProvider("web_search", param="tools[1]")
    assert chat_error(error, SENT) == {**error.to_dict(), "param": None}


def test_another_error_of_a_request_with_web_search_options_keeps_its_words() -> None:
    error = InvalidRequest("Too many tools.", param="tools", code="invalid_value")
    sent = {**SENT, "web_search_options": {}}
    assert chat_error(error, sent) == {**error.to_dict(), "param": "tools"}
