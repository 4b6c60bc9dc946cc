"""A Responses upstream's reasoning summary of several parts (as OpenAI's reasoning models
summarize: a part per paragraph), through the real gateway and the ``openai`` SDK: every
part stays its own, streamed under its ``summary_index`` as hosted streams it (each event
read strictly as the SDK's type), in the SDK's accumulated response, stored, replayed,
and sent back to the upstream as it came. (A Chat upstream gives one reasoning text, and
so one part: these run on the Responses upstreams only.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from openai import OpenAI

from tests.core.tools.wire import EVENTS
from tests.e2e.test_passthrough_tools import RESPONSES_UPSTREAMS, last_upstream_body

MODEL = "fake-model"
PARTS = ["**Planning**", "First look at the question.", "Then answer it."]
REASONING = "\n\n".join(PARTS)
"""The reasoning's text, as the gateway reads it: its summary's parts a paragraph apart."""
DIRECTIVE = f"hi [[hidden]] [[reason:{REASONING}]]"
SUMMARIZED: Any = {"effort": "low", "summary": "auto"}
WHOLE: dict[str, Any] = {
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": part} for part in PARTS],
    "status": "completed",
}
"""A reasoning item given whole (in its ``response.output_item.done`` alone)."""


def raw_events(client: OpenAI, **request: Any) -> list[dict[str, Any]]:
    """A streamed create's events as the gateway sent them, each read strictly as the
    SDK's type."""
    with client.responses.with_streaming_response.create(stream=True, **request) as raw:
        return read_strictly(raw.iter_lines())


def read_strictly(lines: Iterator[str]) -> list[dict[str, Any]]:
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    for event in events:
        EVENTS.validate_python(event, strict=True)
    return events


def assert_summary_streamed(events: list[dict[str, Any]]) -> None:
    """Each part of the summary streamed as hosted streams it: added, its text's deltas,
    its text done, done, under its own ``summary_index``, in order, before its item is
    done, which holds them all."""
    summary = [e for e in events if e["type"].startswith("response.reasoning_summary_")]
    expected: list[tuple[str, int]] = []
    for index, _ in enumerate(PARTS):
        expected.append(("response.reasoning_summary_part.added", index))
        deltas = [
            e
            for e in summary
            if e["type"] == "response.reasoning_summary_text.delta" and e["summary_index"] == index
        ]
        assert deltas, f"part {index} streamed no text"
        expected += [("response.reasoning_summary_text.delta", index)] * len(deltas)
        expected.append(("response.reasoning_summary_text.done", index))
        expected.append(("response.reasoning_summary_part.done", index))
    assert [(e["type"], e["summary_index"]) for e in summary] == expected
    texts = {index: "" for index, _ in enumerate(PARTS)}
    for event in summary:
        if event["type"] == "response.reasoning_summary_text.delta":
            texts[event["summary_index"]] += event["delta"]
    assert list(texts.values()) == PARTS
    done = [e for e in summary if e["type"] == "response.reasoning_summary_text.done"]
    assert [e["text"] for e in done] == PARTS
    parts = [e["part"] for e in summary if e["type"] == "response.reasoning_summary_part.done"]
    assert parts == [{"type": "summary_text", "text": part} for part in PARTS]
    [item] = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    ]
    assert [part["text"] for part in item["summary"]] == PARTS
    last = max(events.index(e) for e in summary)
    assert last < events.index(next(e for e in events if e.get("item") is item))


@RESPONSES_UPSTREAMS
def test_a_streamed_summarys_parts_stream_apart(client: OpenAI) -> None:
    events = raw_events(client, model=MODEL, input=DIRECTIVE, reasoning=SUMMARIZED)
    assert_summary_streamed(events)
    final = events[-1]["response"]
    [reasoning] = [item for item in final["output"] if item["type"] == "reasoning"]
    assert [part["text"] for part in reasoning["summary"]] == PARTS


@RESPONSES_UPSTREAMS
def test_a_summary_given_whole_streams_its_parts_apart(client: OpenAI) -> None:
    directive = f"[[item:{json.dumps(WHOLE)}]] answer"
    assert_summary_streamed(raw_events(client, model=MODEL, input=directive, reasoning=SUMMARIZED))


@RESPONSES_UPSTREAMS
def test_the_sdks_accumulated_response_keeps_the_parts(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input=DIRECTIVE, reasoning=SUMMARIZED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    added = [e for e in events if e.type == "response.reasoning_summary_part.added"]
    assert [e.summary_index for e in added] == [0, 1, 2]
    [reasoning] = [item for item in final.output if item.type == "reasoning"]
    assert [part.text for part in reasoning.summary] == PARTS  # type: ignore[union-attr]


@RESPONSES_UPSTREAMS
def test_an_unstreamed_answers_summary_keeps_its_parts(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=DIRECTIVE, reasoning=SUMMARIZED)
    [reasoning] = [item for item in response.output if item.type == "reasoning"]
    assert [part.text for part in reasoning.summary] == PARTS  # type: ignore[union-attr]


@RESPONSES_UPSTREAMS
def test_the_parts_are_stored_replayed_and_sent_back_apart(
    client: OpenAI, fake_upstream: str
) -> None:
    created = client.responses.create(
        model=MODEL, input=DIRECTIVE, reasoning=SUMMARIZED, background=True
    )
    with client.responses.with_streaming_response.retrieve(created.id, stream=True) as raw:
        assert_summary_streamed(read_strictly(raw.iter_lines()))
    stored = client.responses.retrieve(created.id)
    assert stored.status == "completed"
    [reasoning] = [item for item in stored.output if item.type == "reasoning"]
    assert [part.text for part in reasoning.summary] == PARTS  # type: ignore[union-attr]
    client.responses.create(
        model=MODEL, previous_response_id=created.id, input="again", reasoning=SUMMARIZED
    )
    [sent] = [
        item
        for item in last_upstream_body(fake_upstream)["input"]
        if item.get("type") == "reasoning"
    ]
    assert sent["summary"] == [{"type": "summary_text", "text": part} for part in PARTS]
