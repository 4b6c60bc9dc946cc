"""Tool calls of a real llama-server through the gateway: with ``tool_choice`` required,
llama-server constrains the model by a grammar of its chat template's call syntax (the
template's ``<tool_call>`` tags, learned by its template analysis), and parses the call
out of the text; the gateway gives it to the client as its frontend's call, and sends its
output back.

llama-server takes only the string choices: a named one (an object) it reads as ``auto``,
so the gateway sends it as ``required`` with only the named tool offered. Of two tools,
the tiny model called to choose writes ``get_weather``: naming ``get_time`` shows the
choice forced."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.llama_server.server import MODEL
from tests.llama_server.tiny_model import REPLY

pytestmark = pytest.mark.llama_server

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME: dict[str, Any] = {**WEATHER, "name": "get_time", "description": "The time in a city."}
ARGUMENTS = {"city": ""}
"""What the grammar lets the tiny model write: the quote that ends the string first."""


def test_a_required_call_is_a_function_call_item_and_its_output_goes_back(
    client: OpenAI,
) -> None:
    response = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], tool_choice="required", store=True
    )
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    call = response.output[-1]
    assert call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == ("get_weather", ARGUMENTS)
    assert call.call_id
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    answer = client.responses.create(
        model=MODEL, previous_response_id=response.id, tools=[WEATHER], input=[output]
    )
    assert answer.output_text == REPLY
    assert answer.usage is not None
    assert response.usage is not None
    assert answer.usage.input_tokens > response.usage.input_tokens + response.usage.output_tokens


def test_the_server_reads_a_named_choice_as_auto(llama: str) -> None:
    """Asked directly, llama-server answers a named choice as ``auto`` (its log warns of
    the wrong type): why the gateway never sends it one. Should a newer build honour it,
    this fails, and the rewrite may go."""
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}
        for t in (WEATHER, TIME)
    ]
    named = {"type": "function", "function": {"name": "get_time"}}
    messages: Any = [{"role": "user", "content": "Time?"}]
    with OpenAI(base_url=llama + "/v1", api_key="unused", max_retries=0) as server:
        answer = server.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=tools,
            tool_choice=named,  # type: ignore[arg-type]
        )
        required = server.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=tools,
            tool_choice="required",  # type: ignore[arg-type]
        )
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content == REPLY
    [call] = required.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"  # the tool the model prefers of the two


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_choice_forces_that_tool(client: OpenAI, stream: bool) -> None:
    tools: Any = [WEATHER, TIME]
    choice: Any = {"type": "function", "name": "get_time"}
    if stream:
        events = list(
            client.responses.create(
                model=MODEL, input="Time?", tools=tools, tool_choice=choice, stream=True
            )
        )
        assert events[-1].type == "response.completed"
        output = events[-1].response.output  # type: ignore[union-attr]
    else:
        output = client.responses.create(
            model=MODEL, input="Time?", tools=tools, tool_choice=choice
        ).output
    calls: list[Any] = [item for item in output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_time", ARGUMENTS)]


def test_a_chat_client_s_named_choice_forces_that_tool(client: OpenAI) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}
        for t in (WEATHER, TIME)
    ]
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Time?"}],
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls: list[Any] = answer.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_time", ARGUMENTS)
    ]
    assert answer.choices[0].finish_reason == "tool_calls"


def test_a_streamed_call_s_arguments_arrive_whole(client: OpenAI) -> None:
    stream = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], tool_choice="required", stream=True
    )
    events = list(stream)
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(fragments) > 1  # llama-server streams a call's arguments a token at a time
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == ARGUMENTS == json.loads("".join(fragments))
    assert events[-1].type == "response.completed"


def test_a_messages_client_gets_a_tool_use_block(claude: Anthropic) -> None:
    tool = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    message = claude.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather?"}],
    )
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == ARGUMENTS  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_a_messages_client_s_named_tool_is_the_one_used(claude: Anthropic) -> None:
    tools: Any = [{"name": t["name"], "input_schema": t["parameters"]} for t in (WEATHER, TIME)]
    message = claude.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=tools,
        tool_choice={"type": "tool", "name": "get_time"},
        messages=[{"role": "user", "content": "Time?"}],
    )
    uses: list[Any] = [block for block in message.content if block.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_time", ARGUMENTS)]
