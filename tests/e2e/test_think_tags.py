"""A Chat upstream that leaves an open reasoning model's ``<think>`` block in its content
(a server without a reasoning parser: the fake's ``[[think]]``), behind a backend with
``think_tags``: every frontend shows the reasoning as reasoning and the answer without
tags, streamed or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.e2e.configured import configured_gateway

MODEL = "fake-model"
PROMPT = "hi [[reason:Let me think.]] [[think]]"
THOUGHT = "\nLet me think.\n"
ANSWER = "Hello! You said: hi"


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    backend = {"url": fake_upstream, "think_tags": True}
    with configured_gateway(tmp_path_factory.mktemp("think"), backend) as running:
        yield running.url


@pytest.fixture
def sdk(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key="k", max_retries=0) as client:
        yield client


def test_a_response_has_a_reasoning_item_and_the_text_without_tags(sdk: OpenAI) -> None:
    response = sdk.responses.create(model=MODEL, input=PROMPT)
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert [part.text for part in reasoning.content or ()] == [THOUGHT]
    assert message.type == "message"
    assert response.output_text == ANSWER


def test_a_streamed_response_streams_them_apart(sdk: OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input=PROMPT, stream=True))
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (thought, text) == (THOUGHT, ANSWER)


def test_a_chat_completion_gives_reasoning_content_and_the_text(sdk: OpenAI) -> None:
    """Translated, not relayed untouched: a relayed answer would keep its tags."""
    messages: Any = [{"role": "user", "content": PROMPT}]
    message = sdk.chat.completions.create(model=MODEL, messages=messages).choices[0].message
    assert message.content == ANSWER
    assert (message.model_extra or {})["reasoning_content"] == THOUGHT
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=messages, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == ANSWER
    thought = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert thought == THOUGHT


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_has_a_thinking_block_and_the_text(gateway: str, stream: bool) -> None:
    messages: Any = [{"role": "user", "content": PROMPT}]
    asked: Any = {"model": MODEL, "max_tokens": 2048, "messages": messages}
    asked["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    with Anthropic(base_url=gateway, api_key="k", max_retries=0) as claude:
        if stream:
            with claude.messages.stream(**asked) as streamed:
                answer = streamed.get_final_message()
        else:
            answer = claude.messages.create(**asked)
    thinking, text = answer.content
    assert thinking.type == "thinking"
    assert thinking.thinking == THOUGHT
    assert text.type == "text"
    assert text.text == ANSWER


def test_without_think_tags_the_tags_are_the_answers_text(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The default: content as the model wrote it (and the fast path relays it so)."""
    with (
        configured_gateway(tmp_path, {"url": fake_upstream}) as running,
        OpenAI(base_url=running.url + "/v1", api_key="k", max_retries=0) as plain,
    ):
        response = plain.responses.create(model=MODEL, input=PROMPT)
        messages: Any = [{"role": "user", "content": PROMPT}]
        completion = plain.chat.completions.create(model=MODEL, messages=messages)
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
    assert completion.choices[0].message.content == response.output_text
