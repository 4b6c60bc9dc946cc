"""At most four prompt-cache breakpoints reach an Anthropic upstream: the earliest message
marks go first, and only copies lose them."""

from __future__ import annotations

from typing import Any

from stateway.backends.anthropic_breakpoints import cap_breakpoints

MARK = {"type": "ephemeral"}


def text(name: str, marked: bool = True) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": name}
    if marked:
        block["cache_control"] = MARK
    return block


def marked_texts(body: dict[str, Any]) -> list[str]:
    names = []
    for message in body["messages"]:
        for block in message["content"]:
            inner = block.get("content") if block["type"] == "tool_result" else None
            for part in [block, *(inner or [])]:
                if "cache_control" in part:
                    names.append(part.get("text") or part.get("tool_use_id"))
    return names


def test_the_earliest_message_marks_go_first_and_the_request_keeps_four() -> None:
    first, second = text("one"), text("two")
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [text("inside")]}
    body: dict[str, Any] = {
        "tools": [{"name": "f", "input_schema": {}, "cache_control": MARK}],
        "system": [text("system")],
        "messages": [
            {"role": "user", "content": [first]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f"}]},
            {"role": "user", "content": [result, second]},
            {"role": "assistant", "content": [text("three", marked=False)]},
            {"role": "user", "content": [text("four")]},
        ],
    }
    cap_breakpoints(body)
    assert marked_texts(body) == ["two", "four"]  # with the tool's and the system's: four
    assert "cache_control" in body["tools"][0]
    assert "cache_control" in body["system"][0]
    assert "cache_control" in first
    assert "cache_control" in result["content"][0]
    assert body["messages"][2]["content"][1] is second  # untouched blocks are not copied


def test_the_top_level_automatic_mark_counts_too() -> None:
    body: dict[str, Any] = {
        "cache_control": MARK,
        "messages": [{"role": "user", "content": [text(str(n))]} for n in range(5)],
    }
    cap_breakpoints(body)
    assert marked_texts(body) == ["2", "3", "4"]


def test_four_or_fewer_are_left_as_they_are() -> None:
    messages = [{"role": "user", "content": [text(str(n))]} for n in range(3)]
    body: dict[str, Any] = {"system": [text("system")], "messages": messages}
    cap_breakpoints(body)
    assert body["messages"] is messages
    assert marked_texts(body) == ["0", "1", "2"]


def test_marks_outside_the_messages_are_never_dropped() -> None:
    """A client's own request past four is its own: the upstream refuses it, as Anthropic
    would have."""
    body: dict[str, Any] = {
        "system": [text(f"s{n}") for n in range(5)],
        "messages": [{"role": "user", "content": [text("a"), text("b")]}],
    }
    cap_breakpoints(body)
    assert marked_texts(body) == []
    assert all("cache_control" in block for block in body["system"])
