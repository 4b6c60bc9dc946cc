"""The fake upstream's stateless Responses wire, driven with the official SDK."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseStreamEvent,
)

from stateway.fake_upstream.launch import start_fake_upstream

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


def _create(client: OpenAI, source: Any, **kwargs: Any) -> Any:
    return client.responses.create(model="any-model", input=source, store=False, **kwargs)


def _events(client: OpenAI, source: Any, **kwargs: Any) -> list[ResponseStreamEvent]:
    return list(_create(client, source, stream=True, **kwargs))


def _collect(stream: Iterable[ResponseStreamEvent], into: list[ResponseStreamEvent]) -> None:
    for event in stream:
        into.append(event)


def _final(events: list[ResponseStreamEvent]) -> Response:
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    return last.response


def test_default_reply(client: OpenAI) -> None:
    response = _create(client, "  ping pong  ")
    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.model == "any-model"
    assert response.output_text == "Hello! You said: ping pong"
    (message,) = response.output
    assert isinstance(message, ResponseOutputMessage)
    assert message.content[0].type == "output_text"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 5)
    assert response.usage.total_tokens == 7
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_streamed_event_sequence(client: OpenAI) -> None:
    events = _events(client, "hi [[reason:hmm ok]]")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert [event.type for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 4,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0]
    assert created.type == "response.created"
    assert created.response.status == "in_progress"
    assert created.response.output == []
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["Hello! ", "You ", "said: ", "hi"]
    final = _final(events)
    assert final.id == created.response.id
    reasoning, message = final.output
    assert isinstance(reasoning, ResponseReasoningItem)
    assert isinstance(message, ResponseOutputMessage)
    assert reasoning.content is not None
    assert reasoning.content[0].text == "hmm ok"
    assert reasoning.summary == []
    assert final.output_text == "Hello! You said: hi"
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 2


def test_a_hidden_reasoning_summary_has_a_part_per_paragraph(client: OpenAI) -> None:
    """As OpenAI's reasoning models summarize: each paragraph its own ``summary_text``
    part, streamed under its ``summary_index``."""
    source = "hi [[hidden]] [[reason:**Plan**\n\nfirst look\n\nthen answer]]"
    parts = ["**Plan**", "first look", "then answer"]
    summarized = {"reasoning": {"summary": "auto"}}
    [reasoning, _] = _create(client, source, **summarized).output
    assert [part.text for part in reasoning.summary] == parts
    assert reasoning.content is None or reasoning.content == []
    events = _events(client, source, **summarized)
    texts: dict[int, str] = {}
    for event in events:
        if event.type == "response.reasoning_summary_text.delta":
            texts[event.summary_index] = texts.get(event.summary_index, "") + event.delta
    assert texts == dict(enumerate(parts))
    done = [e for e in events if e.type == "response.reasoning_summary_part.done"]
    assert [(e.summary_index, e.part.text) for e in done] == list(enumerate(parts))
    final = _final(events).output[0]
    assert isinstance(final, ResponseReasoningItem)
    assert [part.text for part in final.summary] == parts


def test_echo_transcript(client: OpenAI) -> None:
    items: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look: "},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AA==",
                    "detail": "auto",
                },
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "a cat?"}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "look", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a cat"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is a cat."}]},
        {"role": "user", "content": "[[echo]] thanks"},
    ]
    expected = (
        "instructions: Answer politely.\n"
        "system: Be brief.\n"
        "user: Look: <image>\n"
        "reasoning: a cat?\n"
        'assistant->look({"x": 1})\n'
        "tool[call_1]: a cat\n"
        "assistant: It is a cat.\n"
        "user: [[echo]] thanks"
    )
    response = _create(client, items, instructions="Answer politely.")
    assert response.output_text == expected
    assert response.instructions == "Answer politely."
    assert _final(_events(client, items, instructions="Answer politely.")).output_text == expected


def test_tool_calls_and_results(client: OpenAI) -> None:
    text = '[[tool:get_weather:{"city": "Paris"}]] [[tool:get_weather:{"city": "Rome"}]]'
    response = _create(client, text, tools=TOOLS)
    calls = response.output
    assert all(isinstance(call, ResponseFunctionToolCall) for call in calls)
    assert [json.loads(call.arguments)["city"] for call in calls] == ["Paris", "Rome"]
    assert len({call.call_id for call in calls}) == 2
    assert all(call.call_id.startswith("call_") for call in calls)
    assert response.tools[0].type == "function"
    follow_up: list[Any] = [
        {"role": "user", "content": text},
        *[
            {
                "type": "function_call",
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
            }
            for c in calls
        ],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
        {"type": "function_call_output", "call_id": calls[1].call_id, "output": "rainy"},
    ]
    assert (
        _create(client, follow_up, tools=TOOLS).output_text == "Tool said: sunny\nTool said: rainy"
    )


def test_streamed_tool_call(client: OpenAI) -> None:
    arguments = '{"city": "Paris", "days": [[1, 2]]}'
    events = _events(client, f"[[tool:get_weather:{arguments}]]", tools=TOOLS)
    types = [event.type for event in events]
    assert "response.output_text.delta" not in types
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == arguments
    assert all(len(delta) <= 8 for delta in deltas)
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == arguments
    added = [e for e in events if e.type == "response.output_item.added"]
    assert isinstance(added[0].item, ResponseFunctionToolCall)
    assert added[0].item.arguments == ""
    (call,) = _final(events).output
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.arguments == arguments
    assert call.name == "get_weather"


def test_max_output_tokens_is_incomplete(client: OpenAI) -> None:
    response = _create(client, "[[words:10]]", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "w1 w2 w3"
    events = _events(client, "[[words:10]]", max_output_tokens=3)
    assert events[-1].type == "response.incomplete"
    assert _final(events).output_text == "w1 w2 w3"
    assert _create(client, "hi [[length]]").status == "incomplete"


def test_a_budget_under_the_least_taken_is_refused_as_hosted_refuses_it() -> None:
    """``min_output_tokens``: a smaller ``max_output_tokens`` is a 400 on that param, in
    hosted OpenAI's words (its least is 16); by default any positive one is taken, as
    vLLM takes it (above)."""
    with (
        start_fake_upstream(min_output_tokens=16) as url,
        OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=10) as hosted,
    ):
        assert _create(hosted, "[[words:20]]", max_output_tokens=16).output_text.count("w") == 16
        assert _create(hosted, "hi").status == "completed"  # no budget: nothing to refuse
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                _create(hosted, "[[words:20]]", max_output_tokens=15, stream=stream)
            assert refused.value.param == "max_output_tokens"
            assert refused.value.code == "integer_below_min_value"
            assert refused.value.message.endswith(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value "
                ">= 16, but got 15 instead."
            )


def test_words(client: OpenAI) -> None:
    events = _events(client, "[[words:200]]")
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == 200
    assert "".join(deltas) == " ".join(f"w{i}" for i in range(1, 201))


@pytest.mark.parametrize("stream", [False, True])
def test_scripted_error(client: OpenAI, stream: bool) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        _create(client, "[[error:429]]", stream=stream)
    assert raised.value.code == "rate_limit_exceeded"
    assert raised.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.InternalServerError):
        _create(client, "[[error:502]]", stream=stream)


def test_cut_mid_stream(client: OpenAI) -> None:
    stream = _create(client, "[[reason:r1 r2]] [[words:5]] [[cut:3]]", stream=True)
    received: list[ResponseStreamEvent] = []
    with pytest.raises(openai.APIConnectionError):
        _collect(stream, received)
    deltas = [e.type for e in received if e.type.endswith(".delta")]
    assert deltas == ["response.reasoning_text.delta"] * 2 + ["response.output_text.delta"]
    assert received[-1].type == "response.output_text.delta"
    with pytest.raises(openai.APIConnectionError):
        _create(client, "[[cut:1]]")


def test_slow(client: OpenAI) -> None:
    assert _create(client, "hi [[slow:20]]").output_text == "Hello! You said: hi"
    assert _final(_events(client, "hi [[slow:5]]")).output_text == "Hello! You said: hi"


def test_previous_response_id_is_unknown(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        _create(client, "hi", previous_response_id="resp_123")


def test_logprobs_when_included(client: OpenAI) -> None:
    include: Any = ["message.output_text.logprobs"]
    response = client.responses.create(
        model="m", input="ping pong", include=include, top_logprobs=2
    )
    [part] = response.output[0].content  # type: ignore[union-attr]
    assert "".join(t.token for t in part.logprobs) == part.text
    assert [len(t.top_logprobs) for t in part.logprobs] == [2] * len(part.logprobs)
    with client.responses.stream(model="m", input="ping pong", include=include) as stream:
        events = list(stream)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert [t.token for d in deltas for t in d.logprobs] == [d.delta for d in deltas]
    assert (
        client.responses.create(model="m", input="x", top_logprobs=2).output[0].content[0].logprobs
        == []
    )  # type: ignore[union-attr]


def test_cached_reports_part_of_the_prompt_read_from_the_cache(client: OpenAI) -> None:
    response = client.responses.create(model="any-model", input="one two three [[cached:2]]")
    assert response.usage is not None
    assert response.usage.input_tokens == 4
    assert response.usage.input_tokens_details.cached_tokens == 2
