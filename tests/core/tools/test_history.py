"""The model's view of gateway items: pairs, approvals, ordering of a mixed round."""

from __future__ import annotations

from typing import Any

from stateway.core.tools.history import DECLINED, model_items


def mcp_call(item_id: str, output: str | None = "ok", **extra: Any) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
        "output": output,
        "error": None,
        **extra,
    }


def shape(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["type"], i.get("call_id", "")) for i in items]


def test_sequential_gateway_calls_are_each_followed_by_their_result() -> None:
    seen = model_items([mcp_call("a"), mcp_call("b")])
    assert shape(seen) == [
        ("function_call", "a"),
        ("function_call_output", "a"),
        ("function_call", "b"),
        ("function_call_output", "b"),
    ]
    assert seen[0]["name"] == "s__t"


def test_a_mixed_rounds_client_calls_come_before_the_gateway_result() -> None:
    client = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    answer = {"type": "function_call_output", "call_id": "c", "output": "x"}
    seen = model_items([mcp_call("a"), client, answer])
    assert shape(seen) == [
        ("function_call", "a"),
        ("function_call", "c"),
        ("function_call_output", "a"),
        ("function_call_output", "c"),
    ]


def test_an_unanswered_approval_request_is_left_out_and_a_denied_one_is_declined() -> None:
    request = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}
    assert model_items([request]) == []
    deny = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": False}
    seen = model_items([request, deny])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == DECLINED


def test_an_approved_call_answers_its_request() -> None:
    request = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}
    approve = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}
    seen = model_items([request, approve, mcp_call("m", "42", approval_request_id="r")])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == "42"


def test_a_failed_or_cut_short_call_tells_the_model() -> None:
    failed = mcp_call("a", None, error="boom")
    cut = mcp_call("b", None, status="incomplete")
    outputs = [i["output"] for i in model_items([failed, cut]) if "output" in i]
    assert outputs == ["Error: boom", "The call did not complete."]


def test_a_web_search_replays_its_numbered_results() -> None:
    sources = [{"type": "url", "url": "https://a.test", "title": "A", "snippet": "about a"}]
    item = {
        "id": "ws",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": sources},
    }
    call, output = model_items([item])
    assert call["arguments"] == '{"query":"q"}'
    assert output["output"] == "[1] A\nURL: https://a.test\nabout a"
