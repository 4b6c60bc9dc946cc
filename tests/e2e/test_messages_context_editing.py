"""Anthropic's context editing on ``/v1/messages``, end to end: the real ``stateway serve``
in front of the real fake upstream speaking each upstream shape, driven by the official
``anthropic`` SDK's beta ``context_management`` (``clear_thinking_20251015``,
``clear_tool_uses_20250919``): what the upstream was sent, and the ``applied_edits`` the
SDK parsed from the message, from a stream's last ``message_delta`` and from a count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest
from anthropic import Anthropic

from stateway.core.compaction.clearing import PLACEHOLDER
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import clear, upstream_log

MODEL = "fake-model"
BETAS = ["context-management-2025-06-27"]
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
TOOLS: Any = [
    {"name": name, "description": name, "input_schema": {"type": "object"}}
    for name in ("read", "search")
]
EDITS: Any = {
    "edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 1000},
            "keep": {"type": "tool_uses", "value": 1},
            "exclude_tools": ["search"],
        },
    ]
}
OUTPUTS = {"r1": "first file " * 300, "s1": "found " * 300, "r2": "second file " * 300}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def gateway(
    request: pytest.FixtureRequest, upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", upstream, "--upstream-api", request.param, "--database", database]
    with start_gateway(args) as url:
        yield url


@pytest.fixture
def claude(gateway: str) -> Iterator[Anthropic]:
    with Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as sdk:
        yield sdk


def create(claude: Anthropic, messages: list[Any], **kwargs: Any) -> Any:
    return claude.beta.messages.create(
        model=MODEL, max_tokens=4000, messages=messages, betas=BETAS, **kwargs
    )


def streamed(claude: Anthropic, messages: list[Any], **kwargs: Any) -> Any:
    with claude.beta.messages.stream(
        model=MODEL, max_tokens=4000, messages=messages, betas=BETAS, **kwargs
    ) as stream:
        return stream.get_final_message()


def thought(claude: Anthropic, idea: str) -> list[Any]:
    """A turn of the model's, its thinking signed by the gateway: a user message, then the
    assistant's blocks."""
    prompt = f"[[reason:{idea}]] hello"
    message = create(claude, [{"role": "user", "content": prompt}], thinking=THINKING)
    assert message.content[0].type == "thinking"
    blocks = [block.model_dump(exclude_none=True) for block in message.content]
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": blocks}]


def use(call_id: str, name: str) -> Any:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"path": call_id}}


def result(call_id: str) -> Any:
    return {"type": "tool_result", "tool_use_id": call_id, "content": OUTPUTS[call_id]}


def history(claude: Anthropic) -> list[Any]:
    """Two turns with thinking, then a tool loop of three uses, asking for the model's view."""
    return [
        *thought(claude, "an old idea"),
        *thought(claude, "a newer idea"),
        {"role": "user", "content": "read both, and search"},
        {"role": "assistant", "content": [use("r1", "read")]},
        {"role": "user", "content": [result("r1")]},
        {"role": "assistant", "content": [use("s1", "search")]},
        {"role": "user", "content": [result("s1")]},
        {"role": "assistant", "content": [use("r2", "read")]},
        {"role": "user", "content": [result("r2")]},
        {"role": "assistant", "content": "read and searched"},
        {"role": "user", "content": "[[echo]] go on"},
    ]


@pytest.mark.parametrize("send", [create, streamed])
def test_old_thinking_and_tool_results_are_cleared_and_reported(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    messages = history(claude)
    clear(upstream)
    message = send(claude, messages, thinking=THINKING, tools=TOOLS, context_management=EDITS)
    # what the upstream got: the last read's result and the search's (excluded) as they
    # were, the first read's replaced; the newer turn's thinking only
    [sent] = upstream_log(upstream)
    body = orjson.dumps(sent["body"]).decode()
    assert OUTPUTS["r1"] not in body
    assert OUTPUTS["s1"] in body
    assert OUTPUTS["r2"] in body
    assert PLACEHOLDER in body
    seen = message.content[-1].text.splitlines()  # the model's view, echoed
    assert f"tool[r1]: {PLACEHOLDER}" in seen
    assert "reasoning: an old idea" not in seen
    assert "reasoning: a newer idea" in seen
    # what the SDK parsed
    assert message.context_management is not None
    thinking, tools = message.context_management.applied_edits
    assert thinking.type == "clear_thinking_20251015"
    assert (thinking.cleared_thinking_turns, thinking.cleared_input_tokens > 0) == (1, True)
    assert tools.type == "clear_tool_uses_20250919"
    assert tools.cleared_tool_uses == 1
    assert tools.cleared_input_tokens > 700  # about 3,300 characters gone


def test_below_the_trigger_nothing_is_cleared(claude: Anthropic, upstream: str) -> None:
    messages = history(claude)[4:]  # the tool loop alone
    edits = {"edits": [{**EDITS["edits"][1], "trigger": {"type": "input_tokens", "value": 10**6}}]}
    clear(upstream)
    message = create(claude, messages, tools=TOOLS, context_management=edits)
    [sent] = upstream_log(upstream)
    assert OUTPUTS["r1"] in orjson.dumps(sent["body"]).decode()
    assert message.context_management is not None
    assert message.context_management.applied_edits == []


def test_a_count_is_of_what_the_edits_leave(claude: Anthropic) -> None:
    messages = history(claude)[4:]
    count = claude.beta.messages.count_tokens(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        thinking=THINKING,
        betas=BETAS,
        context_management=EDITS,
    )
    plain = claude.beta.messages.count_tokens(model=MODEL, messages=messages, tools=TOOLS)
    assert plain.context_management is None
    assert count.context_management is not None
    assert count.context_management.original_input_tokens > count.input_tokens


def test_bad_edits_are_refused_in_anthropics_words(claude: Anthropic) -> None:
    messages = [{"role": "user", "content": "hi"}]
    bad = {"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "turns"}}]}
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(claude, messages, context_management=bad)
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("context_management.edits.0.keep.")
    thoughts = {"edits": [EDITS["edits"][0]]}
    with pytest.raises(anthropic.BadRequestError) as unthinking:
        create(claude, messages, context_management=thoughts)
    assert unthinking.value.body["error"]["message"] == (  # type: ignore[index]
        "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"
    )
