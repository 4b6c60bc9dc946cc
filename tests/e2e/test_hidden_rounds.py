"""Gateway tools for Chat Completions and Messages clients, end to end: a backend's
``gateway_tools`` (a real MCP server built with the ``mcp`` SDK) run in hidden rounds
behind the real gateway, over a Chat Completions and a Responses upstream. The client sees
only its own tools' calls and the final answer; usage is summed over every round."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.launch import start_gateway
from tests.support.mcp_server import RunningMcpServer, serve_mcp

MODEL = "fake-model"
CLIENT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
]


@dataclass
class Setup:
    sdk: OpenAI
    claude: Anthropic
    server: RunningMcpServer


@pytest.fixture(scope="module", params=["chat", "responses"])
def setup(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("hidden")
    with serve_mcp() as server:
        config = directory / "stateway.toml"
        config.write_text(
            f'[[backends]]\nname = "local"\nurl = "{fake_upstream}"\napi = "{request.param}"\n'
            'gateway_tools = [{type = "mcp", server_label = "calc", '
            f'server_url = "{server.url}"}}]\n'
        )
        args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
        with (
            start_gateway(args, env={"STATEWAY_MAX_TOOL_ROUNDS": "4"}) as url,
            OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk,
            Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
        ):
            yield Setup(sdk, claude, server)


def add(a: int, b: int) -> str:
    return f"[[tool:calc__add:{json.dumps({'a': a, 'b': b}, separators=(',', ':'))}]]"


def test_a_gateway_tool_runs_in_a_hidden_round(setup: Setup) -> None:
    completion = setup.sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": add(2, 3)}]
    )
    choice = completion.choices[0]
    assert choice.message.content == "Tool said: 5"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert "mcp" not in completion.model_dump_json()
    assert setup.server.stats.calls_started >= 1


def test_a_streamed_hidden_round_shows_only_the_answer_with_summed_usage(setup: Setup) -> None:
    def streamed(text: str) -> list[Any]:
        return list(
            setup.sdk.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": text}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )

    one = streamed(add(1, 1))
    three = streamed(add(1, 1) + "[[rounds:3]]")
    for chunks in (one, three):
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.content or "" for d in deltas) == "Tool said: 2"
        assert not any(d.tool_calls for d in deltas)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert one[-1].usage.prompt_tokens < three[-1].usage.prompt_tokens


def test_a_mixed_round_returns_only_the_clients_call(setup: Setup) -> None:
    completion = setup.sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": add(2, 2) + '[[tool:lookup:{"k":1}]]'}],
        tools=CLIENT_TOOLS,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "lookup"  # type: ignore[union-attr]


def test_a_messages_client_gets_the_same_hidden_rounds(setup: Setup) -> None:
    message = setup.claude.messages.create(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": add(4, 5)}]
    )
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Tool said: 9"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"


def test_a_responses_client_is_not_offered_them(setup: Setup) -> None:
    response = setup.sdk.responses.create(model=MODEL, input=add(1, 2))
    assert not [item for item in response.output if item.type.startswith("mcp")]


def test_a_failure_before_any_visible_output_is_an_http_error_on_a_stream(setup: Setup) -> None:
    """The gateway's tools are listed (events the client is not shown) before the model
    is asked; a model server that then refuses (429) is answered with its HTTP status,
    which the SDKs retry, not with a 200 stream ending in an error."""
    with pytest.raises(openai.RateLimitError):
        list(
            setup.sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "[[error:429]]"}], stream=True
            )
        )
    with (
        pytest.raises(anthropic.RateLimitError),
        setup.claude.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "[[error:429]]"}]
        ) as stream,
    ):
        list(stream)


def test_the_token_cap_bounds_every_round_together(setup: Setup) -> None:
    """``max_completion_tokens`` bounds the answer, hidden rounds included: the round
    after the tool's gets what the call left (the fake writes one token per word and per
    call), and none is asked once nothing is left."""

    def answer(cap: int | None) -> tuple[str | None, int, str]:
        completion = setup.sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": add(2, 3)}],
            max_completion_tokens=cap,
        )
        assert completion.usage is not None
        choice = completion.choices[0]
        return choice.message.content, completion.usage.completion_tokens, choice.finish_reason

    assert answer(None) == ("Tool said: 5", 4, "stop")
    assert answer(3) == ("Tool said:", 3, "length")
    assert answer(1) == ("", 1, "length")  # nothing shown: empty, as a stream adds up
