"""The SDKs' own tool loops and thread helper end to end: the ``openai`` SDK's
``ResponsesToolRunner`` and the ``anthropic`` SDK's beta ``tool_runner`` and
``messages.thread()``, against the real ``stateway serve`` in front of the real fake
upstream (each upstream API the session's gateway fixture speaks). Each helper checks
more than a plain request does: the runners compare the items a stream announced with the
response it completed, and the thread helper sends only each turn's new messages."""

from __future__ import annotations

from typing import Any

import openai
import pydantic
import pytest
from anthropic import Anthropic, beta_tool
from openai import OpenAI
from openai.lib.responses_tool_runner import RegisteredFunction, ResponsesToolRunner

MODEL = "fake-model"
CALLS = '[[reason:which cities]] [[tool:get_weather:{"city":"Oslo"}]] '
CALLS += '[[tool:get_weather:{"city":"Rome"}]] weather?'
"""Thinks, then calls the client's tool twice; answered, the fake says what it was told."""


class Weather(pydantic.BaseModel):
    city: str


@beta_tool
def get_weather(city: str) -> str:
    """The weather of a city.

    Args:
        city: the city
    """
    return f"sunny in {city}"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("store", [True, False])
def test_the_openai_responses_tool_runner(client: OpenAI, stream: bool, store: bool) -> None:
    tool = openai.pydantic_responses_function_tool(Weather, name="get_weather")
    function = RegisteredFunction.from_tool(
        tool, execute=lambda weather: f"sunny in {weather.city}"
    )
    params: Any = {
        "model": MODEL,
        "input": CALLS,
        "store": store,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
    }
    final = ResponsesToolRunner(functions=[function]).run(client, params, stream=stream)
    assert final.status == "completed"
    assert final.output_text == "Tool said: sunny in Oslo\nTool said: sunny in Rome"


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_tool_runner(claude: Anthropic, stream: bool) -> None:
    runner = claude.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=4000,
        tools=[get_weather],
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": CALLS}],
        stream=stream,
    )
    final = runner.until_done()
    assert final.stop_reason == "end_turn"
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[-1].text == (  # type: ignore[union-attr]
        "Tool said: sunny in Oslo\nTool said: sunny in Rome"
    )


def test_the_anthropic_thread_helper(claude: Anthropic) -> None:
    """``send``, ``stream``, ``tool_runner`` and ``fork`` on one thread: each turn goes as
    a continue of the one before, the model shown the whole thread."""
    thread = claude.beta.messages.thread(
        model=MODEL, max_tokens=4000, system="be brief", tools=[get_weather]
    )
    first = thread.send({"role": "user", "content": "one"})
    assert thread.previous_message_id == first.id
    with thread.stream({"role": "user", "content": "two"}) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[-1].text == "Hello! You said: two"  # type: ignore[union-attr]
    thread.append({"role": "user", "content": CALLS})
    ran = thread.tool_runner(stream=True).until_done()
    assert ran.content[-1].text.startswith("Tool said: sunny in Oslo")  # type: ignore[union-attr]
    fork = thread.fork()
    echoed = thread.send({"role": "user", "content": "[[echo]] three"})
    transcript = echoed.content[-1].text  # type: ignore[union-attr]
    assert transcript.startswith("system: be brief\nuser: one\n")
    assert "Tool said: sunny in Rome" in transcript
    assert transcript.endswith("user: [[echo]] three")
    forked = fork.send({"role": "user", "content": "[[echo]] elsewhere"})
    transcript = forked.content[-1].text  # type: ignore[union-attr]
    assert transcript.startswith("system: be brief\nuser: one\n")
    assert transcript.endswith("user: [[echo]] elsewhere")
    assert "three" not in transcript
