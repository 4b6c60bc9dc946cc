"""Answers of a real llama-server through the gateway, to each frontend's SDK: its
reasoning (llama-server's ``reasoning_content``, parsed from the model's ``<think>``) and
text, streamed and not, and a stored response continued."""

from __future__ import annotations

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.llama_server.server import MODEL
from tests.llama_server.tiny_model import REASONING, REPLY

pytestmark = pytest.mark.llama_server


def test_a_response_holds_the_model_s_reasoning_and_text(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Hi there")
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert [part.text for part in reasoning.content or []] == [REASONING]
    assert response.output_text == REPLY
    assert response.usage is not None
    assert response.usage.output_tokens == 7  # <think>, the reasoning, </think>, 3 words, the end


def test_a_streamed_response_continues_a_stored_one(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Hi there", store=True)
    stream = client.responses.create(
        model=MODEL, input="And again", previous_response_id=first.id, stream=True
    )
    events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert (reasoning, text) == (REASONING, REPLY)
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.previous_response_id == first.id
    assert done.response.usage is not None
    assert first.usage is not None
    assert done.response.usage.input_tokens > first.usage.input_tokens  # the earlier turn too


def test_chat_completions_are_relayed_streamed_and_not(client: OpenAI) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    answer = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == REPLY
    assert answer.choices[0].message.reasoning_content == REASONING  # type: ignore[attr-defined]
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 7


def test_a_message_holds_thinking_only_when_asked(claude: Anthropic) -> None:
    asked = [{"role": "user", "content": "Hi"}]
    plain = claude.messages.create(model=MODEL, max_tokens=100, messages=asked)  # type: ignore[arg-type]
    assert [(block.type, getattr(block, "text", None)) for block in plain.content] == [
        ("text", REPLY)
    ]
    thinking = claude.messages.create(
        model=MODEL,
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=asked,  # type: ignore[arg-type]
    )
    assert [block.type for block in thinking.content] == ["thinking", "text"]
    assert thinking.content[0].thinking == REASONING  # type: ignore[union-attr]
    assert thinking.stop_reason == "end_turn"
