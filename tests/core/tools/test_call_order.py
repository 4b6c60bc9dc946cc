"""A round's outputs reach the model in the order of its calls, as clients answer them
in the order their tools finish."""

from __future__ import annotations

from typing import Any

from stateway.core.tools.call_order import in_call_order
from stateway.core.tools.history import model_items


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": call_id}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def ids(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["type"][:8], item.get("call_id", "")) for item in items]


def test_outputs_answered_as_the_tools_finished_are_sent_in_the_order_of_the_calls() -> None:
    items = [user("go"), call("a"), call("b"), call("c"), output("c"), output("a"), output("b")]

    ordered = model_items(items)

    answers = [("function", "a"), ("function", "b"), ("function", "c")]
    assert ids(ordered) == [*ids([user("go"), call("a"), call("b"), call("c")]), *answers]
    assert [item["output"] for item in ordered[4:]] == ["a", "b", "c"]
    assert [item["call_id"] for item in items[4:]] == ["c", "a", "b"]  # not changed


def test_each_round_is_ordered_by_its_own_calls_and_reasoning_between_calls_is_kept() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    first = [call("a"), reasoning, call("b"), output("b"), output("a")]
    second = [call("c"), call("d"), output("d"), output("c")]

    ordered = in_call_order([*first, user("more"), *second])

    assert [item.get("call_id") for item in ordered] == [
        "a", None, "b", "a", "b", None, "c", "d", "c", "d",
    ]  # fmt: skip


def test_an_output_of_no_call_of_the_round_keeps_its_place_after_the_others() -> None:
    items = [call("a"), call("b"), output("x"), output("b"), output("a")]

    assert [item["call_id"] for item in in_call_order(items)] == ["a", "b", "a", "b", "x"]


def test_outputs_already_in_order_are_the_items_themselves() -> None:
    items = [call("a"), call("b"), output("a"), output("b")]
    assert in_call_order(items) == items


def test_custom_tool_outputs_are_ordered_as_their_calls_too() -> None:
    """A custom tool's call and output reach the model as a function call and its output:
    they are ordered alike."""
    calls = [{"type": "custom_tool_call", "call_id": c, "name": "patch", "input": c} for c in "ab"]
    outputs = [{"type": "custom_tool_call_output", "call_id": c, "output": c} for c in "ba"]

    ordered = model_items([user("go"), *calls, *outputs])

    assert [item["output"] for item in ordered[3:]] == ["a", "b"]


def test_text_between_a_rounds_calls_keeps_them_one_round() -> None:
    """Claude may write between its parallel ``tool_use`` blocks (text, then a call, then
    more text and another call): the calls are still one round, so outputs already in
    their order stay in it, and outputs out of it are put in it."""
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}
    round_ = [user("go"), call("a"), said, call("b")]

    assert in_call_order([*round_, output("a"), output("b")]) == [
        *round_, output("a"), output("b"),
    ]  # fmt: skip
    assert in_call_order([*round_, output("b"), output("a")])[-2:] == [output("a"), output("b")]


def test_a_user_message_between_calls_starts_another_round() -> None:
    items = [call("a"), user("and"), call("b"), output("b"), output("a")]

    assert [item.get("call_id") for item in in_call_order(items)] == ["a", None, "b", "b", "a"]
