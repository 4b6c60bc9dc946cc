"""Every field the Open Responses spec requires, through the real gateway: on each event
of streams of the main kinds (text, with its tokens' logprobs too, reasoning, a function
call, a refusal, a summary, a response cut short, one failing, one run in the
background), on the Response objects they carry, and on a response created without a
stream and retrieved. The tables are :mod:`tests.support.open_responses`'s; the
SDK-typed checks elsewhere cannot see a field left out, as the SDK's types make most of
them optional."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from openai import OpenAI

from tests.support.open_responses import missing_in_event, missing_in_response

MODEL = "fake-model"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = '[[tool:get_weather:{"city": "Rome"}]]'
STREAMS: dict[str, dict[str, Any]] = {
    "text": {"input": "[[words:3]]"},
    "reasoning and a call": {"input": f"[[reason:why]] {CALL}", "tools": [WEATHER_TOOL]},
    "refusal": {"input": "[[refuse:not this]]"},
    "logprobs": {
        "input": "[[words:3]]",
        "top_logprobs": 2,
        "include": ["message.output_text.logprobs"],
    },
    # a Responses upstream streams a summary; a Chat one its reasoning text
    "summary": {"input": "[[hidden]] [[reason:one\n\ntwo]] hi", "reasoning": {"summary": "auto"}},
    "cut short": {"input": "[[words:50]]", "max_output_tokens": 16},
    "failing": {"input": "[[words:20]] [[fail:3]]"},
    "background": {"input": "hi", "background": True},
}
EVERY_UPSTREAM_STREAMS = {
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.refusal.delta",
    "response.refusal.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
}
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each event as sent: its ``event:`` line's name and its data's JSON."""
    name = ""
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


def test_every_streamed_event_holds_the_fields_the_spec_requires(client: OpenAI) -> None:
    missing: dict[str, list[str]] = {}
    seen: set[str] = set()
    for case, request in STREAMS.items():
        with client.responses.with_streaming_response.create(
            model=MODEL, stream=True, **request
        ) as raw:
            events = list(sse_events(raw.iter_lines()))
        kinds = [event["type"] for _, event in events]
        assert [name for name, _ in events] == kinds, case
        assert [event["sequence_number"] for _, event in events] == list(range(len(events)))
        assert kinds[0] == "response.created", case
        assert kinds[-1] in TERMINAL, case
        seen.update(kinds)
        found = [path for _, event in events for path in missing_in_event(event)]
        if found:
            missing[case] = sorted(set(found))
    assert missing == {}
    assert seen >= EVERY_UPSTREAM_STREAMS


def test_a_created_and_a_retrieved_response_hold_the_fields_the_spec_requires(
    client: OpenAI,
) -> None:
    created = client.responses.with_raw_response.create(
        model=MODEL, input=f"[[reason:why]] hi {CALL}", tools=[WEATHER_TOOL]
    )
    body = json.loads(created.text)
    assert [item["type"] for item in body["output"]] == ["reasoning", "function_call"]
    assert missing_in_response(body) == []
    retrieved = client.responses.with_raw_response.retrieve(body["id"])
    assert missing_in_response(json.loads(retrieved.text)) == []
