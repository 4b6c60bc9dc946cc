"""``GET /v1/responses/{id}`` with ``include`` (the SDK's ``include[]=...``), through the
real gateway and fake upstream with the official ``openai`` SDK: the output shows what a
create with that ``include`` shows (every storage and upstream API shape)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseOutputMessage, ResponseReasoningItem

from tests.e2e.test_compaction import as_input, user

MODEL = "fake-model"
ENCRYPTED = "reasoning.encrypted_content"
LOGPROBS = "message.output_text.logprobs"


def _reasoning(response: Response) -> ResponseReasoningItem:
    [item] = [item for item in response.output if item.type == "reasoning"]
    assert isinstance(item, ResponseReasoningItem)
    return item


def _tokens(response: Response) -> list[Any]:
    [message] = [item for item in response.output if item.type == "message"]
    assert isinstance(message, ResponseOutputMessage)
    [part] = message.content
    assert part.type == "output_text"
    return list(part.logprobs or [])


def test_encrypted_content_comes_back_only_when_included(client: OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="hi [[reason:the stored plan]]", include=[ENCRYPTED]
    )
    sealed = _reasoning(made).encrypted_content
    assert sealed is not None
    assert _reasoning(client.responses.retrieve(made.id)).encrypted_content is None
    again = client.responses.retrieve(made.id, include=[ENCRYPTED])
    assert _reasoning(again).encrypted_content == sealed


def test_a_response_made_without_the_include_is_sealed_as_it_is_read(client: OpenAI) -> None:
    """Its reasoning comes sealed, and the seal carries it into a stateless turn."""
    made = client.responses.create(model=MODEL, input="hi [[reason:a later secret]]")
    assert _reasoning(made).encrypted_content is None
    read = client.responses.retrieve(made.id, include=[ENCRYPTED])
    sealed = _reasoning(read).encrypted_content
    assert sealed is not None
    assert "secret" not in sealed
    assert _reasoning(read).content == _reasoning(made).content
    answer = client.responses.create(
        model=MODEL,
        input=[user("hi"), *as_input(read.output), user("[[echo]]")],  # type: ignore[list-item]
        store=False,
    )
    assert "reasoning: a later secret" in answer.output_text


def test_logprobs_come_back_only_when_included(client: OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="some words", include=[LOGPROBS], top_logprobs=1
    )
    tokens = _tokens(made)
    assert tokens
    assert _tokens(client.responses.retrieve(made.id)) == []
    assert _tokens(client.responses.retrieve(made.id, include=[LOGPROBS])) == tokens
    both = client.responses.retrieve(made.id, include=[LOGPROBS, ENCRYPTED])
    assert _tokens(both) == tokens


def test_an_empty_include_entry_is_refused_as_on_create(client: OpenAI) -> None:
    made = client.responses.create(model=MODEL, input="hi")
    include: Any = [LOGPROBS, ""]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.retrieve(made.id, include=include, stream=stream)
        assert refused.value.code == "invalid_value"
        assert refused.value.param == "include[1]"


def test_other_include_values_are_accepted_and_change_nothing(client: OpenAI) -> None:
    made = client.responses.create(model=MODEL, input="hi")
    read = client.responses.retrieve(
        made.id, include=["message.input_image.image_url", "web_search_call.action.sources"]
    )
    assert read.output == made.output
