"""What a real llama-server says of its context through the gateway: the window it serves
(learned at start-up), its own count of a prompt's tokens, and its refusal of a prompt
that does not fit, in each frontend's words."""

from __future__ import annotations

import re
import time
from typing import Any

import anthropic
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.llama_server.server import MODEL, SLOT_WINDOW
from tests.llama_server.test_tools import TIME, WEATHER

pytestmark = pytest.mark.llama_server

TOO_LONG = "word " * SLOT_WINDOW  # a pair of characters a token: past twice the window


def test_the_window_learned_is_one_slot_s(claude: Anthropic) -> None:
    """``--ctx-size`` divided among ``--parallel`` slots, not the window the model was
    trained for (``n_ctx_train``); learned beside serving, so asked until it is known."""
    for _ in range(200):
        [model] = list(claude.models.list())
        if model.max_input_tokens is not None:
            break
        time.sleep(0.05)
    assert (model.id, model.max_input_tokens) == (MODEL, SLOT_WINDOW)


@pytest.mark.parametrize("tools", [[], [WEATHER]])
def test_input_tokens_are_the_server_s_own_count(
    client: OpenAI, llama: str, tools: list[dict[str, object]]
) -> None:
    """The chat template rendered by ``/apply-template`` (tools included) and tokenized:
    what llama-server counts itself (its ``/v1/responses/input_tokens``) and reports in
    the generation's usage."""
    body = {"model": MODEL, "input": "Hi there", "instructions": "Be brief.", "tools": tools}
    counted = client.responses.input_tokens.count(**body)  # type: ignore[arg-type]
    with OpenAI(base_url=llama + "/v1", api_key="unused", max_retries=0) as server:
        own = server.responses.input_tokens.count(**body)  # type: ignore[arg-type]
    answered = client.responses.create(**body)  # type: ignore[arg-type]
    assert answered.usage is not None
    assert counted.input_tokens == own.input_tokens == answered.usage.input_tokens


def test_input_tokens_count_the_tool_a_named_choice_offers(client: OpenAI) -> None:
    """A named choice is sent as ``required`` with its tool alone (llama-server reads a
    named one as ``auto``): that prompt is the one counted."""
    choice = {"type": "function", "name": "get_time"}
    body = {"model": MODEL, "input": "Time?", "tools": [WEATHER, TIME], "tool_choice": choice}
    counted = client.responses.input_tokens.count(**body)  # type: ignore[arg-type]
    only: Any = [TIME]
    alone = client.responses.input_tokens.count(model=MODEL, input="Time?", tools=only)
    answered = client.responses.create(**body)  # type: ignore[arg-type]
    assert answered.usage is not None
    assert counted.input_tokens == alone.input_tokens == answered.usage.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_window_is_context_length_exceeded(client: OpenAI, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=TOO_LONG, stream=stream)
    assert refused.value.code == "context_length_exceeded"
    assert f"exceeds the available context size ({SLOT_WINDOW} tokens)" in refused.value.message


def test_a_messages_client_is_told_the_prompt_is_too_long(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": TOO_LONG}]
        )
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert re.fullmatch(rf"prompt is too long: \d+ tokens > {SLOT_WINDOW} maximum", message)


def test_an_answer_filling_the_slot_stops_with_the_window_exceeded(claude: Anthropic) -> None:
    """llama-server takes any ``max_tokens`` (Claude Code's 32,000) and stops where prompt
    and output fill the slot, a ``length`` finish; the gateway, knowing the slot's window,
    answers a Messages client as Anthropic does then. The prompt leaves the model room for
    about 3 of the 7 tokens of its reply (a pair of characters a token; the count of a
    shorter prompt may be one off)."""
    counted = claude.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "ab" * 100}]
    )
    pairs = 100 + SLOT_WINDOW - 3 - counted.input_tokens
    message = claude.messages.create(
        model=MODEL,
        max_tokens=32000,
        messages=[{"role": "user", "content": "ab" * pairs}],
        timeout=60,
    )
    assert message.stop_reason == "model_context_window_exceeded"
    usage = message.usage
    read = usage.cache_read_input_tokens or 0  # Anthropic's input_tokens leave them out
    assert usage.input_tokens + read + usage.output_tokens == SLOT_WINDOW
    assert 0 < usage.output_tokens < 7
