"""Fields of the encoded Response and list pages that clients act on: error codes, the
completion time, echoed settings, page cursors."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from stateway.core.commands import CreateResponse
from stateway.core.generation_settings import GenerationSettings
from stateway.core.ports import ItemPage
from stateway.core.response import ResponseState
from stateway.protocols.responses.encode import encode_item_page, encode_response


def state(**fields: Any) -> ResponseState:
    settings = fields.pop("settings", GenerationSettings())
    command = CreateResponse(model="m", input=[], settings=settings)
    response = ResponseState.start("resp_1", "t", 1_700_000_000.5, command)
    for name, value in fields.items():
        setattr(response, name, value)
    return response


@pytest.mark.parametrize(
    ("error", "wire_code"),
    [
        ({"code": "rate_limit_exceeded", "message": "slow", "status": 429}, "rate_limit_exceeded"),
        # an upstream's own code for a rate: retried by Codex as a rate, not an invalid prompt
        ({"code": "too_many_requests", "message": "slow", "status": 429}, "rate_limit_exceeded"),
        # a quota used up: hosted's code, on which Codex stops with its quota message
        ({"code": "insufficient_quota", "message": "paid", "status": 429}, "insufficient_quota"),
        (
            {"code": "context_length_exceeded", "message": "long", "status": 400},
            "context_length_exceeded",
        ),
        ({"code": "upstream_rejected", "message": "no", "status": 400}, "invalid_prompt"),
        ({"code": "model_not_found", "message": "no", "status": 404}, "invalid_prompt"),
        ({"code": "invalid_request_error", "message": "no", "status": 499}, "invalid_prompt"),
        ({"code": "internal_error", "message": "bug", "status": 500}, "server_error"),
        ({"code": "server_error", "message": "bug", "status": 503}, "server_error"),
        ({"code": "internal_error", "message": "bug"}, "server_error"),
    ],
)
def test_error_codes_fold_into_the_specs_set_by_status(
    error: dict[str, Any], wire_code: str
) -> None:
    body = encode_response(state(status="failed", error=error))

    assert body["error"] == {"code": wire_code, "message": error["message"]}


def test_a_snapshot_shows_no_error_and_no_completion() -> None:
    failed = state(status="failed", error={"code": "internal_error", "message": "x", "status": 500})
    assert encode_response(failed, snapshot=True)["error"] is None
    completed = state(status="completed", completed_at=1_700_000_003.9)
    assert encode_response(completed, snapshot=True)["completed_at"] is None


def test_completed_at_is_whole_seconds_not_before_created_at() -> None:
    body = encode_response(state(status="completed", completed_at=1_700_000_003.9))

    assert body["completed_at"] == 1_700_000_003
    assert body["created_at"] == 1_700_000_000
    assert body["created_at"] <= body["completed_at"]
    assert encode_response(state(status="failed"))["completed_at"] is None


def test_incomplete_details_carry_the_reason() -> None:
    body = encode_response(state(status="incomplete", incomplete_reason="content_filter"))

    assert body["incomplete_details"] == {"reason": "content_filter"}
    assert encode_response(state(status="completed"))["incomplete_details"] is None


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_tool_calls_are_echoed(parallel: bool) -> None:
    settings = GenerationSettings(parallel_tool_calls=parallel)
    assert encode_response(state(settings=settings))["parallel_tool_calls"] is parallel


def item(item_id: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "id": item_id, "content": []}


def test_an_item_page_names_its_first_and_last_items() -> None:
    page = encode_item_page(ItemPage([item("msg_a"), item("msg_b"), item("msg_c")], True))

    assert page == {
        "object": "list",
        "data": [item("msg_a"), item("msg_b"), item("msg_c")],
        "first_id": "msg_a",
        "last_id": "msg_c",
        "has_more": True,
    }


def test_an_empty_item_page_has_no_cursors() -> None:
    page = encode_item_page(ItemPage([], False))

    assert (page["data"], page["first_id"], page["last_id"], page["has_more"]) == (
        [],
        None,
        None,
        False,
    )


def test_an_error_without_a_message_still_has_a_string_message() -> None:
    body = encode_response(state(status="failed", error={"code": "internal_error"}))

    assert body["error"] == {"code": "server_error", "message": ""}


@pytest.mark.parametrize(
    ("requested", "announced", "served"),
    [
        (None, "auto", "default"),
        ("auto", "auto", "default"),
        ("default", "default", "default"),
        ("flex", "flex", "flex"),
        ("priority", "priority", "priority"),
        ("fast", "fast", "priority"),
    ],
)
def test_service_tier_is_the_one_asked_for_until_the_end_then_the_one_served(
    requested: str | None, announced: str, served: str
) -> None:
    settings = GenerationSettings(service_tier=requested)
    completed = state(settings=settings, status="completed")
    assert encode_response(completed, snapshot=True)["service_tier"] == announced
    assert encode_response(state(settings=settings))["service_tier"] == announced  # in progress
    for status in ("completed", "incomplete", "failed", "cancelled"):
        assert encode_response(state(settings=settings, status=status))["service_tier"] == served


def test_the_image_policy_in_effect_is_echoed_when_image_was_sent() -> None:
    """``Response.image``: the effective policy (``disabled``: the gateway compresses no
    image context) for a request that sent ``image``, in the snapshot too; none else."""
    settings = GenerationSettings(image={"context_compression": "disabled"})
    for snapshot in (True, False):
        body = encode_response(state(settings=settings, status="completed"), snapshot=snapshot)
        assert body["image"] == {"context_compression": "disabled"}
        parsed = Response.model_validate(body)
        assert parsed.image is not None
        assert parsed.image.context_compression == "disabled"
    plain = encode_response(state(status="completed"))
    assert "image" in plain
    assert plain["image"] is None


def _search(status: str, action: str = "search") -> dict[str, Any]:
    done = {"type": action, "query": "q"} if action == "search" else {"type": action, "url": "u"}
    return {"id": "ws_1", "type": "web_search_call", "status": status, "action": done}


def test_a_response_declaring_web_search_counts_the_searches_that_ran_in_tool_usage() -> None:
    """As hosted's ``tool_usage.web_search.num_requests``: the billable searches, so a
    failed one (the provider's error, past ``max_uses``) and a page opened are not counted;
    the families with no usage have zero counts."""
    output = [
        _search("completed"),
        _search("failed"),
        _search("completed", action="open_page"),
        _search("completed"),
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [],
        },
    ]
    settings = GenerationSettings(tools=[{"type": "web_search_preview"}])
    wire = encode_response(state(settings=settings, status="completed", output=output))
    parsed = Response.model_validate(wire)
    assert parsed.tool_usage is not None
    assert parsed.tool_usage.web_search.num_requests == 2
    assert parsed.tool_usage.image_gen.total_tokens == 0
    assert wire["tool_usage"]["image_gen"]["input_tokens_details"] == {
        "image_tokens": 0,
        "text_tokens": 0,
    }


def test_tool_usage_is_left_out_without_web_search_and_in_a_snapshot() -> None:
    """Omitted where it would say nothing: no web search declared, or a snapshot (the
    response as first announced); a running response's counts the searches so far."""
    plain = encode_response(state(status="completed"))
    assert "tool_usage" not in plain
    settings = GenerationSettings(tools=[{"type": "web_search"}])
    assert "tool_usage" not in encode_response(state(settings=settings), snapshot=True)
    running = encode_response(state(settings=settings, output=[_search("completed")]))
    assert running["tool_usage"]["web_search"] == {"num_requests": 1}
