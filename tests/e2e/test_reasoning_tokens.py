"""The reasoning tokens an answer reports reach the client, wherever its model server
reports them: OpenAI's and vLLM's ``completion_tokens_details``, or SGLang's ``usage``'s
own ``reasoning_tokens`` (the fake's ``[[sglang]]``; a Responses upstream ignores it and
reports them as that wire does)."""

from __future__ import annotations

import pytest
from openai import OpenAI

MODEL = "fake-model"
THOUGHT = "[[reason:one two three four]]"
"""Four reasoning tokens (one a word), then the answer."""


@pytest.mark.parametrize("dialect", ["", "[[sglang]]"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answers_reasoning_tokens_are_its_usage(
    client: OpenAI, dialect: str, stream: bool
) -> None:
    text = f"{THOUGHT} {dialect} hello"
    if stream:
        with client.responses.stream(model=MODEL, input=text) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model=MODEL, input=text)
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 4
    assert response.usage.output_tokens > 4
