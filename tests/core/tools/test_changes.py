"""Tool changes mid-conversation folded into the one tool list a model is offered: the
declared tools, plus the tools added, minus those withdrawn, in the order the changes
come; a reference to no tool, or a definition taking a name another kind of tool has,
refused."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.errors import ToolNameConflict, ToolReferenceUnresolved
from stateway.core.tools.changes import ToolChange, tools_in_effect


def function(name: str, description: str = "") -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": name, "parameters": {"type": "object"}}
    if description:
        tool["description"] = description
    return tool


WEATHER, CLOCK = function("weather"), function("clock")
SEARCH = {"type": "web_search"}
SERVER = {"type": "mcp", "server_label": "docs", "server_url": "https://docs.example/mcp"}


REFERENCE = "messages.1.content.0.tool.name"
DEFINITION = "messages.1.content.0.tool.definition.name"


def added(name: str, param: str = REFERENCE) -> ToolChange:
    return ToolChange(param, name)


def removed(name: str, param: str = REFERENCE) -> ToolChange:
    return ToolChange(param, name, removed=True)


def defined(tool: dict[str, Any], param: str = DEFINITION) -> ToolChange:
    return ToolChange(param, str(tool.get("name", "web_search")), definition=tool)


def test_no_change_leaves_the_declared_tools() -> None:
    tools = [WEATHER, SEARCH, SERVER]
    assert tools_in_effect(tools, []) == tools


def test_a_removal_withdraws_a_declared_tool_and_an_addition_offers_it_again() -> None:
    assert tools_in_effect([WEATHER, CLOCK], [removed("weather")]) == [CLOCK]
    both = [removed("weather"), added("weather")]
    assert tools_in_effect([WEATHER, CLOCK], both) == [WEATHER, CLOCK]  # where declared


def test_the_web_search_server_tool_is_named_web_search() -> None:
    assert tools_in_effect([WEATHER, SEARCH], [removed("web_search")]) == [WEATHER]


def test_a_tool_defined_by_value_follows_the_declared_ones() -> None:
    lookup = function("lookup")
    assert tools_in_effect([WEATHER, SERVER], [defined(lookup)]) == [WEATHER, SERVER, lookup]


def test_a_definition_again_replaces_the_earlier_one_where_it_stood() -> None:
    newer = function("weather", "the weather, in kelvin")
    assert tools_in_effect([WEATHER, CLOCK], [defined(newer)]) == [newer, CLOCK]
    lookup, again = function("lookup"), function("lookup", "look up, again")
    changes = [defined(lookup), defined(function("other")), defined(again)]
    assert tools_in_effect([], changes) == [again, function("other")]


def test_a_tool_defined_by_value_may_be_removed_and_referenced_later() -> None:
    lookup = function("lookup")
    changes = [defined(lookup), removed("lookup")]
    assert tools_in_effect([WEATHER], changes) == [WEATHER]
    assert tools_in_effect([WEATHER], [*changes, added("lookup")]) == [WEATHER, lookup]


def test_a_reference_to_a_tool_not_defined_there_is_unresolved() -> None:
    param = "messages.3.content.1.tool.name"
    for change in (added("clock", param), removed("clock", param)):
        with pytest.raises(ToolReferenceUnresolved) as caught:
            tools_in_effect([WEATHER], [change])
        assert caught.value.status == 400
        assert caught.value.code == "tool_reference_unresolved"
        assert caught.value.param == param
        assert caught.value.message.startswith(f"{param}: the tool 'clock' is not defined")
    with pytest.raises(ToolReferenceUnresolved):  # defined only later than the reference
        tools_in_effect([], [added("lookup"), defined(function("lookup"))])


def test_an_mcp_server_is_no_tool_a_name_references() -> None:
    with pytest.raises(ToolReferenceUnresolved):
        tools_in_effect([SERVER], [removed("docs")])


def test_a_definition_taking_another_kinds_name_conflicts() -> None:
    named_search = function("web_search")
    param = "messages.5.content.0.tool.definition.name"
    with pytest.raises(ToolNameConflict) as caught:
        tools_in_effect([SEARCH], [defined(named_search, param)])
    assert caught.value.status == 400
    assert caught.value.code == "tool_name_conflict"
    assert caught.value.param == param
    assert "'web_search' is already used by a server tool" in caught.value.message
    with pytest.raises(ToolNameConflict):  # withdrawn, the name is still that kind's
        tools_in_effect([SEARCH], [removed("web_search"), defined(named_search)])
    newer_search = {"type": "web_search", "max_uses": 2}
    assert tools_in_effect([SEARCH], [defined(newer_search)]) == [newer_search]
