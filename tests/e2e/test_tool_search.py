"""Tool search end to end: the real gateway in front of the fake model, driven by the
``openai`` SDK; the gateway's own search and a client-executed one (as Codex sends it)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI

MODEL = "fake-model"
EXEC: dict[str, Any] = {"type": "function", "name": "exec_command", "parameters": {}}
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "defer_loading": True,
}
CLIENT_SEARCH: dict[str, Any] = {"type": "tool_search", "execution": "client"}


def test_the_gateway_searches_deferred_tools_and_the_model_goes_on(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input='[[tool:tool_search:{"query":"weather"}]]',
        tools=[EXEC, WEATHER, {"type": "tool_search"}],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    search, found, message = response.output
    assert search.type == "tool_search_call"
    assert (search.execution, search.status) == ("server", "completed")
    assert search.arguments == {"query": "weather"}
    assert found.type == "tool_search_output"
    assert (search.call_id, found.execution, found.call_id) == (None, "server", None)
    assert [tool.type for tool in found.tools] == ["function"]
    assert found.tools[0].name == "get_weather"  # type: ignore[union-attr]
    assert message.type == "message"
    assert message.content[0].text == (  # type: ignore[union-attr]
        "Tool said: Loaded tools: get_weather. They can be called now."
    )
    stored = client.responses.retrieve(response.id)
    assert [item.type for item in stored.output] == [item.type for item in response.output]


def test_a_streamed_gateway_search_announces_its_items_in_progress(client: OpenAI) -> None:
    """The search's call and its output are each announced ``in_progress`` (as every item
    is: hosted, the Open Responses spec), then done ``completed``."""
    with client.responses.stream(
        model=MODEL,
        input='[[tool:tool_search:{"query":"weather"}]]',
        tools=[EXEC, WEATHER, {"type": "tool_search"}],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.status) for i in added] == [
        ("tool_search_call", "in_progress"),
        ("tool_search_output", "in_progress"),
        ("message", "in_progress"),
    ]
    assert [i.status for i in done] == ["completed"] * 3


def test_a_client_search_round_trip(client: OpenAI) -> None:
    tools = [EXEC, CLIENT_SEARCH]
    first = client.responses.create(
        model=MODEL,
        input='[[tool:tool_search:{"query":"orders"}]]',
        tools=tools,  # type: ignore[arg-type]
    )
    [search] = first.output
    assert search.type == "tool_search_call"
    assert (search.execution, search.status) == ("client", "completed")
    assert search.arguments == {"query": "orders"}
    assert search.call_id
    loaded = {
        "type": "tool_search_output",
        "call_id": search.call_id,
        "execution": "client",
        "tools": [{"type": "function", "name": "lookup_order", "parameters": {}}],
    }
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[loaded],  # type: ignore[list-item]
        tools=tools,  # type: ignore[arg-type]
    )
    assert second.status == "completed"
    assert second.output_text == "Tool said: Loaded tools: lookup_order. They can be called now."
    [kept] = client.responses.input_items.list(second.id).data
    assert kept.type == "tool_search_output"
    assert kept.call_id == search.call_id
    assert kept.tools[0].name == "lookup_order"  # type: ignore[union-attr]

    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            previous_response_id=second.id,
            input=[{**loaded, "call_id": "call_unknown"}],  # type: ignore[list-item]
            tools=tools,  # type: ignore[arg-type]
        )
    assert caught.value.code == "tool_call_not_found"
    assert caught.value.param == "input[0].call_id"


def test_a_loaded_functions_call_comes_in_the_namespace_of_its_own_name(client: OpenAI) -> None:
    """As hosted gives it (the OpenAI Agents SDK finds a deferred function by this shape
    only), streamed and not; sent back with it, it is that function's call."""
    tools: Any = [EXEC, WEATHER, {"type": "tool_search"}]
    first = client.responses.create(
        model=MODEL, input='[[tool:tool_search:{"query":"weather"}]]', tools=tools
    )
    call = '[[tool:get_weather:{"city":"Oslo"}]]'
    with client.responses.stream(
        model=MODEL, previous_response_id=first.id, input=call, tools=tools
    ) as stream:
        events = list(stream)
        response = stream.get_final_response()
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    final = response.output
    for item in (*added, *done, *final, *client.responses.retrieve(response.id).output):
        assert item.type == "function_call"
        assert (item.name, item.namespace) == ("get_weather", "get_weather")
    history: Any = [
        {"role": "user", "content": call},
        final[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": final[0].call_id, "output": "sunny"},
        {"role": "user", "content": "[[echo]]"},
    ]
    again = client.responses.create(model=MODEL, input=history, tools=tools)
    assert 'assistant->get_weather({"city":"Oslo"})' in again.output_text


MINE: dict[str, Any] = {
    "type": "function",
    "name": "tool_search",
    "description": "The client's own search.",
    "parameters": {"type": "object", "properties": {"terms": {"type": "string"}}},
}
"""A client's function called ``tool_search``, which hosted takes beside its tool search
(no function there): the gateway offers its search apart, as ``gateway_tool_search``."""


def test_a_client_function_named_tool_search_is_offered_beside_the_gateways_search(
    client: OpenAI,
) -> None:
    both = '[[tool:gateway_tool_search:{"query":"weather"}]][[tool:tool_search:{"terms":"x"}]]'
    tools: Any = [MINE, WEATHER, {"type": "tool_search"}]
    first = client.responses.create(model=MODEL, input=both, tools=tools)
    [search] = [i for i in first.output if i.type == "tool_search_call"]
    assert (search.execution, search.arguments) == ("server", {"query": "weather"})
    [found] = [i for i in first.output if i.type == "tool_search_output"]
    assert [tool.name for tool in found.tools] == ["get_weather"]  # type: ignore[union-attr]
    [mine] = [i for i in first.output if i.type == "function_call"]
    assert (mine.name, mine.arguments) == ("tool_search", '{"terms":"x"}')
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": mine.call_id, "output": "mine"},
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=tools,
    )
    transcript = second.output_text  # each call under the name it is offered by
    assert 'assistant->gateway_tool_search({"query":"weather"})' in transcript
    assert 'assistant->tool_search({"terms":"x"})' in transcript


def test_a_client_search_that_loads_a_function_named_tool_search_stays_offered(
    client: OpenAI,
) -> None:
    """A client's search may load a function of the search's own name: from then on the
    function is the client's, and the search is offered apart (never silently lost)."""
    tools: Any = [EXEC, CLIENT_SEARCH]
    first = client.responses.create(
        model=MODEL, input='[[tool:tool_search:{"query":"orders"}]]', tools=tools
    )
    [search] = first.output
    loaded: Any = {
        "type": "tool_search_output",
        "call_id": search.call_id,  # type: ignore[union-attr]
        "execution": "client",
        "tools": [{"type": "function", "name": "tool_search", "parameters": {}}],
    }
    again = '[[tool:gateway_tool_search:{"query":"more"}]]'
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[loaded, {"role": "user", "content": again}],
        tools=tools,
    )
    [searched] = second.output
    assert searched.type == "tool_search_call"
    assert (searched.execution, searched.arguments) == ("client", {"query": "more"})
