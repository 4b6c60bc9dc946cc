"""llama-server's own ``/v1/responses`` as the gateway's upstream (``api = "responses"``).

It is a layer over its Chat Completions: its stream numbers nothing (no ``output_index``,
``content_index`` or ``sequence_number``; an event names its item by ``item_id``), and it
finishes its reasoning item only after the message and calls that follow it. The gateway
places each event by its item's id; what the layer cannot do is in
docs/compatibility.md (llama-server's Responses API)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI
from openai.types.responses import Response

from tests.e2e.configured import RunningGateway
from tests.llama_server.server import MODEL, SLOT_WINDOW
from tests.llama_server.test_tools import ARGUMENTS, WEATHER
from tests.llama_server.tiny_model import REASONING, REPLY

pytestmark = pytest.mark.llama_server


@pytest.fixture
def client(responses_gateway: RunningGateway) -> Iterator[OpenAI]:
    with OpenAI(base_url=responses_gateway.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def claude(responses_gateway: RunningGateway) -> Iterator[Anthropic]:
    with Anthropic(base_url=responses_gateway.url, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def _create(client: OpenAI, stream: bool, **request: Any) -> Response:
    if not stream:
        return client.responses.create(model=MODEL, **request)
    events = list(client.responses.create(model=MODEL, stream=True, **request))
    assert events[-1].type == "response.completed", events[-1]
    return events[-1].response


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_holds_the_model_s_reasoning_and_text(client: OpenAI, stream: bool) -> None:
    response = _create(client, stream, input="Hi there")
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert [part.text for part in reasoning.content or []] == [REASONING]
    assert response.output_text == REPLY
    assert response.usage is not None
    assert response.usage.output_tokens == 7


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_and_its_output_go_back_as_the_whole_context(client: OpenAI, stream: bool) -> None:
    """The gateway keeps the state: a continuation reaches llama-server (which refuses
    ``previous_response_id``) as the whole context, the earlier reasoning, message and
    call included, with ``store: false``."""
    first = _create(
        client, stream, input="Weather?", tools=[WEATHER], tool_choice="required", store=True
    )
    assert [item.type for item in first.output] == ["reasoning", "message", "function_call"]
    call = first.output[-1]
    assert call.type == "function_call"
    assert (call.name, json.loads(call.arguments)) == ("get_weather", ARGUMENTS)
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    answer = _create(client, stream, previous_response_id=first.id, tools=[WEATHER], input=[output])
    assert answer.output_text == REPLY
    assert answer.usage is not None
    assert first.usage is not None
    assert answer.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_a_streamed_call_s_arguments_arrive_a_token_at_a_time(client: OpenAI) -> None:
    stream = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], tool_choice="required", stream=True
    )
    events = list(stream)
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(fragments) > 1
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == ARGUMENTS == json.loads("".join(fragments))
    assert [e.sequence_number for e in events] == list(range(len(events)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_client_gets_its_tool_use_block(claude: Anthropic, stream: bool) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 200,
        "tools": [{"name": "get_weather", "input_schema": WEATHER["parameters"]}],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "Weather?"}],
    }
    if stream:
        with claude.messages.stream(**request) as streamed:
            message = streamed.get_final_message()
    else:
        message = claude.messages.create(**request)
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == ARGUMENTS  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_a_chat_client_s_stream_is_translated(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 7


def test_input_tokens_are_the_server_s_own_count(client: OpenAI) -> None:
    """Its ``/v1/responses/input_tokens``, asked first by a Responses backend."""
    body: dict[str, Any] = {"model": MODEL, "input": "Hi there", "tools": [WEATHER]}
    counted = client.responses.input_tokens.count(**body)
    answered = client.responses.create(**body)
    assert answered.usage is not None
    assert counted.input_tokens == answered.usage.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_window_is_context_length_exceeded(client: OpenAI, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="word " * SLOT_WINDOW, stream=stream)
    assert refused.value.code == "context_length_exceeded"


def test_what_its_responses_api_cannot_say_stays_unsaid(client: OpenAI, claude: Anthropic) -> None:
    """What this layer loses (docs/compatibility.md), pinned so that a build that says it
    shows here: an answer cut by its budget is ``completed`` (a Messages client sees
    ``end_turn``), and the text has no tokens, asked for or not."""
    cut = claude.messages.create(
        model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
    )
    assert (cut.stop_reason, cut.usage.output_tokens) == ("end_turn", 3)
    response = client.responses.create(
        model=MODEL, input="Hi", include=["message.output_text.logprobs"]
    )
    message = response.output[-1]
    assert message.type == "message"
    assert [part.logprobs for part in message.content] == [[]]  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError, match="top_logprobs requires logprobs"):
        client.responses.create(
            model=MODEL, input="Hi", include=["message.output_text.logprobs"], top_logprobs=2
        )
