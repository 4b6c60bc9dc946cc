"""Structured outputs through the real gateway with the ``openai`` SDK's helpers: a
pydantic model given to ``responses.parse(text_format=...)`` or
``chat.completions.parse(response_format=...)`` (and their streams) reaches the upstream
as its API's schema format (Chat's ``response_format``, Responses' ``text.format``, strict
as the SDK makes it), and the answer the model writes to it (the fake's ``[[say]]``)
comes back parsed, over Chat and Responses upstreams."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from openai import OpenAI

from tests.e2e.test_passthrough_tools import last_upstream_body

MODEL = "fake-model"


class Weather(pydantic.BaseModel):
    city: str
    degrees: int


ANSWER = Weather(city="Paris", degrees=21)
ASK = f"weather? [[say:{ANSWER.model_dump_json()}]]"


def _schema_sent(body: dict[str, Any]) -> dict[str, Any]:
    """The schema format the upstream got, as the Responses API words it."""
    if "response_format" in body:
        wire = body["response_format"]
        assert wire["type"] == "json_schema"
        return {"type": "json_schema", **wire["json_schema"]}
    fmt: dict[str, Any] = body["text"]["format"]
    return fmt


def test_responses_parse_fills_output_parsed(client: OpenAI, fake_upstream: str) -> None:
    parsed = client.responses.parse(model=MODEL, input=ASK, text_format=Weather)
    assert parsed.output_parsed == ANSWER
    sent = _schema_sent(last_upstream_body(fake_upstream))
    assert (sent["name"], sent["strict"]) == ("Weather", True)
    assert sent["schema"]["required"] == ["city", "degrees"]
    assert parsed.text is not None
    assert parsed.text.format is not None
    assert parsed.text.format.type == "json_schema"

    with client.responses.stream(model=MODEL, input=ASK, text_format=Weather) as stream:
        done = [event for event in stream if event.type == "response.output_text.done"]
        final = stream.get_final_response()
    assert final.output_parsed == ANSWER
    assert json.loads(done[0].text) == ANSWER.model_dump()
    stored = client.responses.retrieve(final.id)
    assert stored.output_text == ANSWER.model_dump_json()


def test_chat_parse_fills_message_parsed(client: OpenAI, fake_upstream: str) -> None:
    messages: Any = [{"role": "user", "content": ASK}]
    completion = client.chat.completions.parse(
        model=MODEL, messages=messages, response_format=Weather
    )
    assert completion.choices[0].message.parsed == ANSWER
    sent = _schema_sent(last_upstream_body(fake_upstream))
    assert (sent["name"], sent["strict"]) == ("Weather", True)

    with client.chat.completions.stream(
        model=MODEL, messages=messages, response_format=Weather
    ) as stream:
        kinds = {event.type for event in stream}
        streamed = stream.get_final_completion()
    assert streamed.choices[0].message.parsed == ANSWER
    assert "content.done" in kinds
