"""Mid-conversation tool changes (``tool_addition`` / ``tool_removal`` blocks in
``role: "system"`` messages): the tools the model is offered are those in effect at the
end of the conversation, and every malformed change is refused as Anthropic refuses it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest, ToolNameConflict, ToolReferenceUnresolved
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages
from stateway.protocols.messages.errors import encode_error

OBJECT = {"type": "object"}
WEATHER = {"name": "weather", "description": "the weather", "input_schema": OBJECT}
CLOCK = {"name": "clock", "input_schema": OBJECT}
ECHO = {
    "name": "mcp__late__late_echo",
    "description": "Echo text back (a tool that arrived late).",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
MARK = {"type": "ephemeral"}


def reference(name: str) -> dict[str, Any]:
    return {"type": "tool_reference", "name": name}


def addition(tool: dict[str, Any], **block: Any) -> dict[str, Any]:
    return {"type": "tool_addition", "tool": tool, **block}


def removal(name: str) -> dict[str, Any]:
    return {"type": "tool_removal", "tool": reference(name)}


def defined(definition: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_definition", "definition": definition}


def changed(*blocks: Any, tools: list[Any] | None = None, **fields: Any) -> bytes:
    """A request whose one user turn is followed by a system message of ``blocks``."""
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": list(blocks)}]
    body = {"model": "m", "max_tokens": 100, "messages": messages}
    return orjson.dumps(body | fields | ({} if tools is None else {"tools": tools}))


def offered(raw: bytes) -> list[str | None]:
    return [tool.get("name", tool["type"]) for tool in decode_messages(raw).settings.tools]


def refused(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw)
    assert caught.value.status == 400
    return caught.value


def test_a_removal_withdraws_a_tool_and_an_addition_offers_it_again() -> None:
    tools = [WEATHER, CLOCK]
    assert offered(changed(removal("weather"), tools=tools)) == ["clock"]
    again = changed(removal("weather"), addition(reference("weather")), tools=tools)
    assert offered(again) == ["weather", "clock"]


def test_a_system_message_of_changes_only_is_no_message_for_the_model() -> None:
    command = decode_messages(changed(removal("weather"), tools=[WEATHER, CLOCK]))
    assert [item["role"] for item in command.input] == ["user"]


def test_claude_codes_late_tools_are_offered_and_its_text_stays_with_the_mark() -> None:
    """Claude Code 2.1.332 declares a late MCP tool deferred and adds it by reference
    after a line naming it, the message's cache mark on the last change."""
    note = {"type": "text", "text": "The following tools just became available: ..."}
    deferred = {**ECHO, "defer_loading": True}
    raw = changed(
        note,
        addition(reference("mcp__late__late_echo"), cache_control=MARK),
        tools=[WEATHER, deferred],
    )
    command = decode_messages(raw)
    assert [tool["name"] for tool in command.settings.tools] == ["weather", ECHO["name"]]
    system = command.input[-1]
    assert system["role"] == "system"
    assert system["content"] == [
        {"type": "input_text", "text": note["text"], "cache_control": MARK}
    ]


def test_a_tool_defined_by_value_is_offered_as_declared_tools_are() -> None:
    command = decode_messages(changed(addition(defined(ECHO)), tools=[WEATHER]))
    *_, echo = command.settings.tools
    assert echo == {
        "type": "function",
        "name": ECHO["name"],
        "parameters": ECHO["input_schema"],
        "description": ECHO["description"],
        "strict": False,
    }
    bash = addition(defined({"type": "bash_20250124", "name": "bash"}))
    assert offered(changed(bash)) == ["bash"]  # an Anthropic-defined client tool too


def test_a_tool_choice_judges_the_tools_in_effect() -> None:
    choice = {"type": "tool", "name": ECHO["name"]}
    raw = changed(addition(defined(ECHO)), tool_choice=choice)
    assert decode_messages(raw).settings.tool_choice == {"type": "function", "name": ECHO["name"]}
    gone = changed(
        removal("weather"), tools=[WEATHER], tool_choice={"type": "tool", "name": "weather"}
    )
    assert str(refused(gone)) == "Tool 'weather' not found in provided tools"


def test_count_tokens_counts_the_tools_in_effect() -> None:
    raw = changed(removal("weather"), addition(defined(ECHO)), tools=[WEATHER, CLOCK])
    counted = decode_count_tokens(raw).request.settings.tools
    assert [tool["name"] for tool in counted] == ["clock", ECHO["name"]]


def test_a_reference_to_no_tool_there_is_unresolved_with_its_code() -> None:
    error = refused(changed(addition(reference("clock")), tools=[WEATHER]))
    assert isinstance(error, ToolReferenceUnresolved)
    assert error.param == "messages.1.content.0.tool.name"
    answered = encode_error(error)["error"]
    assert answered["details"] == {"error_code": "tool_reference_unresolved"}
    assert answered["message"] == (
        "messages.1.content.0.tool.name: the tool 'clock' is not defined at this position in "
        "the conversation: declare it in tools, or define it in an earlier tool_addition."
    )  # nothing said of defer_loading: a deferred tool is offered as any other
    later = changed(removal("lookup"), addition(defined({**CLOCK, "name": "lookup"})))
    assert refused(later).param == "messages.1.content.0.tool.name"  # defined only after


def test_a_definition_under_another_kinds_name_conflicts() -> None:
    search = {"type": "web_search_20250305", "name": "web_search"}
    custom = addition(defined({"name": "web_search", "input_schema": OBJECT}))
    error = refused(changed(custom, tools=[search]))
    assert isinstance(error, ToolNameConflict)
    assert error.param == "messages.1.content.0.tool.definition.name"
    assert encode_error(error)["error"]["details"] == {"error_code": "tool_name_conflict"}
    newer = addition(defined({"type": "web_search_20260209", "name": "web_search"}))
    assert offered(changed(newer, tools=[search])) == ["web_search"]  # a newer version


@pytest.mark.parametrize(
    ("block", "words"),
    [
        (
            addition({"type": "tool_reference"}),
            "messages.1.content.0.tool.name: Field required",
        ),
        (
            {"type": "tool_removal", "tool": defined(CLOCK)},
            "messages.1.content.0.tool.type: tool type 'tool_definition' is not supported "
            "here; expected 'tool_reference', 'mcp_tool_reference', 'mcp_toolset_reference'.",
        ),
        (
            addition(defined({"name": "clock", "input_schema": {}})),
            "messages.1.content.0.tool.definition.input_schema.type: Field required",
        ),
        (
            addition(defined({"name": "a clock", "input_schema": OBJECT})),
            "messages.1.content.0.tool.definition.name: String should match pattern "
            "'^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            addition(defined({"type": "computer_20250124", "name": "computer"})),
            "messages.1.content.0.tool.definition.type: tool type 'computer_20250124' is not",
        ),
        (
            addition(defined({"type": "mcp_toolset", "mcp_server_name": "docs"})),
            "messages.1.content.0.tool.definition.type: 'mcp_toolset' cannot be defined",
        ),
        (
            addition(defined({"type": "tool_search_tool_bm25", "name": "tool_search_tool_bm25"})),
            "messages.1.content.0.tool.definition.type: 'tool_search_tool_bm25' cannot be "
            "defined in a message; declare it in tools.",
        ),
        (
            addition({"type": "mcp_toolset_reference", "server_name": "docs"}),
            "messages.1.content.0.tool.type: 'mcp_toolset_reference' is not supported",
        ),
        (
            {
                "type": "tool_removal",
                "tool": {"type": "mcp_tool_reference", "server_name": "d", "name": "t"},
            },
            "messages.1.content.0.tool.type: 'mcp_tool_reference' is not supported",
        ),
        (
            addition(defined({**CLOCK, "cache_control": MARK}), cache_control=MARK),
            "messages.1.content.0.cache_control: cache_control goes on the block or in its "
            "tool's definition, not both.",
        ),
        (
            addition(defined({**CLOCK, "cache_control": MARK, "defer_loading": True})),
            "messages.1.content.0.tool.definition.cache_control: a deferred tool's "
            "definition cannot carry cache_control.",
        ),
    ],
)
def test_a_malformed_change_is_named(block: dict[str, Any], words: str) -> None:
    assert str(refused(changed(block, tools=[WEATHER]))).startswith(words)


def test_a_change_outside_a_system_message_is_refused() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, removal("weather")]}]
    raw = orjson.dumps({"model": "m", "max_tokens": 9, "messages": messages, "tools": [WEATHER]})
    assert str(refused(raw)) == (
        "messages.0.content.1.type: a 'tool_removal' block cannot appear in a user message."
    )


def test_a_turn_scoped_system_message_carries_no_change() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "system", "clear_at": "next_user_message", "content": [removal("weather")]},
    ]
    raw = orjson.dumps({"model": "m", "max_tokens": 9, "messages": messages, "tools": [WEATHER]})
    assert str(refused(raw)) == (
        "messages.1: a turn-scoped system message supports text blocks only "
        "(clear_at: 'next_user_message')"
    )


def test_a_thread_continue_without_tools_leaves_its_changes_to_the_core() -> None:
    """The thread's tools are known once its stored turn is read: the changes go with
    the turn, judged then (:mod:`stateway.core.threads`); a continue declaring tools has
    them applied as it is decoded."""
    thread = {"type": "continue", "previous_message_id": "msg_1"}
    command = decode_messages(changed(removal("clock"), thread=thread))
    assert command.settings.tools == []
    assert command.thread is not None
    [change] = command.thread.tool_changes
    assert (change.name, change.removed) == ("clock", True)
    declared = decode_messages(changed(removal("clock"), thread=thread, tools=[WEATHER, CLOCK]))
    assert [tool["name"] for tool in declared.settings.tools] == ["weather"]
    assert declared.thread is not None
    assert declared.thread.tool_changes == []
