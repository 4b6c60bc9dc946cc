"""Tool calls of a real llama-server through the gateway: with ``tool_choice`` required,
llama-server constrains the model by a grammar of its chat template's call syntax (the
template's ``<tool_call>`` tags, learned by its template analysis), and parses the call
out of the text; the gateway gives it to the client as its frontend's call, and sends its
output back."""

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
