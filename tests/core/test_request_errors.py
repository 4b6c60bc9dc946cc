"""A request's errors as the hosted API gives them: the field each names, its code and its
words (the frontends pass them on as they are)."""

from __future__ import annotations

from stateway.core.errors import (
    BodyTimeout,
    ContextTooLong,
    ConversationLocked,
    DuplicateItem,
    IdempotencyKeyReused,
    NoSearchProvider,
    PreviousResponseNotFound,
    ResponseInProgress,
)


def test_a_continuation_from_a_response_it_cannot_continue_names_previous_response_id() -> None:
    missing = PreviousResponseNotFound("resp_1")
    assert missing.to_dict() == {
        "message": "Previous response with id 'resp_1' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    running = ResponseInProgress("resp_1")
    assert running.to_dict() == {
        "message": "Response with id 'resp_1' is still in progress; continue from it once it "
        "has finished.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "response_in_progress",
    }


def test_a_conversation_another_turn_holds_is_locked_in_hosteds_words() -> None:
    assert ConversationLocked().to_dict() == {
        "message": "Another process is currently operating on this conversation. Please retry "
        "in a few seconds.",
        "type": "invalid_request_error",
        "param": "conversation",
        "code": "conversation_locked",
    }


def test_a_reused_idempotency_key_names_the_header_unless_told_otherwise() -> None:
    header = IdempotencyKeyReused()
    assert (header.status, header.param, header.code) == (
        409,
        "Idempotency-Key",
        "idempotency_key_reused",
    )
    assert header.message == (
        "This idempotency key was already used with a different request; use a new key for "
        "a new request."
    )
    assert IdempotencyKeyReused("command_id").param == "command_id"


def test_a_context_too_long_knows_no_output_tokens_asked_until_told() -> None:
    error = ContextTooLong("too long", tokens=10, window=8)
    assert (error.tokens, error.window, error.requested, error.param) == (10, 8, None, "input")
    assert error.message == "too long"


def test_a_body_timeout_says_its_seconds_in_words() -> None:
    assert BodyTimeout(1).message == "The request body did not arrive within 1 second."
    assert BodyTimeout(0.5).message == "The request body did not arrive within 0.5 seconds."
    assert BodyTimeout(30).message == "The request body did not arrive within 30 seconds."


def test_a_body_timeout_closes_the_connection() -> None:
    """The rest of the body may still come: the connection cannot carry another request."""
    assert BodyTimeout(30).headers == {"Connection": "close"}


def test_a_web_search_without_a_provider_says_how_to_configure_one() -> None:
    error = NoSearchProvider("web_search", param="tools[1]")
    assert error.to_dict() == {
        "message": "Tool type 'web_search' needs a web search provider, and none is"
        " configured: set STATEWAY_WEB_SEARCH_PROVIDER (searxng, brave or tavily), or send"
        " it with 'external_web_access' to make it an optional hint.",
        "type": "invalid_request_error",
        "param": "tools[1]",
        "code": NoSearchProvider.code,
    }


def test_a_duplicate_item_is_named_as_hosted_names_it() -> None:
    error = DuplicateItem("msg_1", param="input[2].id")
    assert (error.message, error.param) == (
        "Duplicate item found with id msg_1. Remove duplicate items from your input and try again.",
        "input[2].id",
    )
