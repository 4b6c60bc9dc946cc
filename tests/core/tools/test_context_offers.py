from typing import Any

from stateway.core.tools.context_offers import context_added, with_context_tools

FUNCTION = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [{"type": "function", "name": "spawn", "description": "Spawn an agent"}],
}


def test_an_earlier_turns_additional_tools_count_unless_declared_again() -> None:
    extra = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [NAMESPACE, {"type": "web_search", "external_web_access": False}],
    }
    assert with_context_tools([FUNCTION], [extra]) == [FUNCTION, NAMESPACE]
    assert with_context_tools([NAMESPACE], [extra]) == [NAMESPACE]
    assert with_context_tools([FUNCTION], []) == [FUNCTION]


def test_the_tools_a_context_adds_are_those_no_declared_tool_offers() -> None:
    """What the feature stages are shown beside the declared tools: a search's output of a
    declared deferred tool adds nothing, one of another tool adds it, loaded."""
    deferred = {**named("weather"), "defer_loading": True}
    declared = [FUNCTION, deferred, {"type": "mcp", "server_label": "docs"}]
    extra = extra_tools(FUNCTION, NAMESPACE)
    found = {
        "type": "tool_search_output",
        "tools": [deferred, {**named("more"), "defer_loading": True}],
    }
    assert context_added(declared, [extra, found]) == [NAMESPACE, named("more")]
    assert context_added(declared, []) == []


def extra_tools(*tools: dict[str, Any]) -> dict[str, Any]:
    return {"type": "additional_tools", "role": "developer", "tools": list(tools)}


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name}


def test_every_additional_tools_item_of_the_context_counts_in_order() -> None:
    message = {"type": "message", "role": "user", "content": "hi"}
    hint = {"type": "web_search", "external_web_access": False}
    context = [message, extra_tools(hint, named("a")), message, extra_tools(named("b"))]
    assert with_context_tools([FUNCTION], context) == [FUNCTION, named("a"), named("b")]


def test_a_tool_declared_twice_in_the_context_is_offered_once() -> None:
    context = [extra_tools(named("a")), extra_tools(named("exec_command")), extra_tools(named("a"))]
    assert with_context_tools([FUNCTION], context) == [FUNCTION, named("a")]


def test_a_declared_shell_tool_keeps_its_name_from_the_contexts_tools() -> None:
    assert with_context_tools([{"type": "shell"}], [extra_tools(named("shell"))]) == [
        {"type": "shell"}
    ]
