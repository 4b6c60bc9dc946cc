"""Client-owned tool types through the real gateway, the ``openai`` SDK and the fake model."""

from __future__ import annotations

import uuid
from typing import Any

from openai import OpenAI

from tests.e2e.routing import fake_requests

MODEL = "fake-model"
EXEC_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
WEB_SEARCH_HINT: dict[str, Any] = {"type": "web_search", "external_web_access": False}


def test_a_web_search_hint_is_left_out(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="hi",
        tools=[EXEC_TOOL, WEB_SEARCH_HINT],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    assert [tool.type for tool in response.tools] == ["function"]


NAMESPACE_TOOL: dict[str, Any] = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents",
    "tools": [
        {
            "type": "function",
            "name": "spawn_agent",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
        }
    ],
}


def test_a_namespace_call_round_trip(client: OpenAI) -> None:
    tools = [EXEC_TOOL, NAMESPACE_TOOL]
    first = client.responses.create(
        model=MODEL,
        input='[[tool:multi_agent_v1__spawn_agent:{"task": "t"}]]',
        tools=tools,  # type: ignore[arg-type]
    )
    [call] = first.output
    assert call.type == "function_call"
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1")
    assert first.tools[1].type == "namespace"
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "spawned"}],
        tools=tools,  # type: ignore[arg-type]
    )
    assert second.status == "completed"
    assert second.output_text
    # Over HTTP Codex resends the whole history instead: the public call goes back as it came.
    resent = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "[[echo]]"},
            call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "function_call_output", "call_id": call.call_id, "output": "spawned"},
        ],
        tools=tools,  # type: ignore[arg-type]
        store=False,
    )
    assert resent.status == "completed"
    assert "multi_agent_v1__spawn_agent" in resent.output_text  # what the model saw


def test_a_tool_choice_naming_a_namespace_member_forces_it(
    client: OpenAI, fake_upstream: str
) -> None:
    """The choice names the member by its own name and its namespace (as an
    ``allowed_tools`` entry does); the model is forced to call the flattened function."""
    marker = f"force-{uuid.uuid4().hex}"
    choice: Any = {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}
    response = client.responses.create(
        model=MODEL,
        input=marker,
        tools=[EXEC_TOOL, NAMESPACE_TOOL],  # type: ignore[list-item]
        tool_choice=choice,
    )
    assert response.status == "completed"
    [sent] = fake_requests(fake_upstream, marker)
    forced = sent["body"]["tool_choice"]
    if forced == "required":  # a Chat server not known to force a named choice
        names = [tool["function"]["name"] for tool in sent["body"]["tools"]]
    else:  # named: Chat's shape, or the Responses wire's
        names = [forced.get("function", forced)["name"]] if isinstance(forced, dict) else []
    assert names == ["multi_agent_v1__spawn_agent"], f"sent as {forced!r}"


APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
PATCH_DIRECTIVE = '[[tool:apply_patch:{"input": "*** Begin Patch\\n*** End Patch"}]]'


def test_a_custom_tool_call_round_trip(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=PATCH_DIRECTIVE, tools=[APPLY_PATCH])  # type: ignore[list-item]
    [call] = first.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", "*** Begin Patch\n*** End Patch")
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "applied"}],
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    )
    assert second.status == "completed"
    items = client.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["custom_tool_call_output"]


def test_a_streamed_custom_tool_call(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL,
        input=PATCH_DIRECTIVE,
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert "response.custom_tool_call_input.delta" in kinds
    done = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    assert done.input == "*** Begin Patch\n*** End Patch"  # type: ignore[union-attr]
    assert "response.function_call_arguments.delta" not in kinds
    [call] = final.output
    assert call.type == "custom_tool_call"
    assert call.input == done.input  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_codex_shaped_request_succeeds(client: OpenAI) -> None:
    """Function tools, a namespace and a web_search hint at the top level, plus an
    ``additional_tools`` item holding a namespace with a custom tool (as Codex sends)."""
    extra = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [
            {
                "type": "namespace",
                "name": "functions",
                "description": "Shell",
                "tools": [{"type": "custom", "name": "exec", "description": "Run a command"}],
            }
        ],
    }
    history: list[Any] = [
        {"type": "message", "role": "developer", "content": "You are Codex.", "id": "msg_a"},
        extra,
        {
            "type": "message",
            "role": "user",
            "content": '[[tool:functions__exec:{"input": "ls"}]]',
            "id": "msg_b",
        },
    ]
    first = client.responses.create(
        model=MODEL,
        input=history,
        tools=[EXEC_TOOL, NAMESPACE_TOOL, WEB_SEARCH_HINT],  # type: ignore[list-item]
        tool_choice="auto",
        parallel_tool_calls=True,
        store=False,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="k",
    )
    [call] = first.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.namespace, call.input) == ("exec", "functions", "ls")
    history += [
        call.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "a.txt"},
        {"type": "message", "role": "user", "content": "[[echo]]"},
    ]
    second = client.responses.create(
        model=MODEL,
        input=history,
        tools=[EXEC_TOOL, NAMESPACE_TOOL, WEB_SEARCH_HINT],  # type: ignore[list-item]
        store=False,
    )
    assert second.status == "completed"
    assert "functions__exec" in second.output_text
    assert "additional_tools" not in second.output_text


def test_additional_tools_of_an_earlier_turn_stay_offered(client: OpenAI) -> None:
    extra = {"type": "additional_tools", "role": "developer", "tools": [NAMESPACE_TOOL]}
    first = client.responses.create(model=MODEL, input=[extra, {"role": "user", "content": "hi"}])  # type: ignore[list-item]
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input='[[tool:multi_agent_v1__spawn_agent:{"task": "t"}]]',
    )
    [call] = second.output
    assert call.type == "function_call"
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1")
    assert second.tools == []  # the echo shows the request's own declarations


TWO_TOOLS: Any = [
    {"type": "function", "name": name, "parameters": {"type": "object"}} for name in ("f", "g")
]


def test_without_parallel_tool_calls_a_round_makes_one_call(client: OpenAI) -> None:
    """A model server that does not enforce ``parallel_tool_calls: false`` sends two calls:
    the client gets the first only, streamed or not; with parallel calls, both."""
    prompt = "[[tool:f:{}]] [[tool:g:{}]] two"
    one = client.responses.create(
        model=MODEL, input=prompt, tools=TWO_TOOLS, parallel_tool_calls=False, store=False
    )
    assert [(i.type, getattr(i, "name", None)) for i in one.output] == [("function_call", "f")]
    with client.responses.stream(
        model=MODEL, input=prompt, tools=TWO_TOOLS, parallel_tool_calls=False
    ) as stream:
        added = [e.item.type for e in stream if e.type == "response.output_item.added"]
        streamed = stream.get_final_response()
    assert added == ["function_call"]
    assert [getattr(i, "name", None) for i in streamed.output] == ["f"]
    assert [getattr(i, "name", None) for i in client.responses.retrieve(streamed.id).output] == [
        "f"
    ]
    both = client.responses.create(model=MODEL, input=prompt, tools=TWO_TOOLS, store=False)
    assert [getattr(i, "name", None) for i in both.output] == ["f", "g"]
