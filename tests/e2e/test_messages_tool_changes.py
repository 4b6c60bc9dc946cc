"""Mid-conversation tool changes end to end: the ``anthropic`` SDK's ``beta.messages``
sends ``tool_addition`` and ``tool_removal`` blocks in ``role: "system"`` messages to the
real gateway, in front of the real fake upstream speaking each upstream shape; the
upstream is offered the tools in effect (an added one, not a removed one), a model calls
a tool added by value, and a change naming no tool is refused with Anthropic's code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from anthropic.types.tool_reference_unresolved_error import ToolReferenceUnresolvedError

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import MODEL, TOOLS, clear, upstream_log

BETAS = ["mid-conversation-tool-changes-2026-07-01", "inline-tools-2026-09-15"]
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
CLOCK = {"name": "clock", "description": "the time", "input_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """Its chat template takes a system message only first, as many open models' do."""
    with start_fake_upstream(system_first=True) as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def upstream_api(request: pytest.FixtureRequest) -> str:
    api: str = request.param
    return api


@pytest.fixture(scope="module")
def claude(
    upstream: str, upstream_api: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Anthropic]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", upstream, "--upstream-api", upstream_api, "--database", database]
    with start_gateway(args) as url, Anthropic(base_url=url, api_key="k", max_retries=0) as sdk:
        yield sdk


def send(claude: Anthropic, messages: list[Any], **kwargs: Any) -> anthropic.types.beta.BetaMessage:
    return claude.beta.messages.create(
        model=MODEL, max_tokens=400, messages=messages, betas=BETAS, **kwargs
    )


def offered(sent: dict[str, Any], upstream_api: str) -> list[str]:
    """The names of the tools an upstream request offered."""
    tools = sent["body"].get("tools") or []
    if upstream_api == "chat":
        return [tool["function"]["name"] for tool in tools]
    return [tool["name"] for tool in tools]


def test_a_tool_added_by_value_is_offered_and_called(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    clear(upstream)
    prompt = '[[tool:lookup:{"q":"gateway"}]] look it up'
    change = {
        "role": "system",
        "content": [
            {"type": "text", "text": "lookup is available from now on."},
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": LOOKUP}},
        ],
    }
    message = send(claude, [{"role": "user", "content": prompt}, change], tools=TOOLS)
    assert message.stop_reason == "tool_use"
    [use] = [block for block in message.content if block.type == "tool_use"]
    assert (use.name, use.input) == ("lookup", {"q": "gateway"})
    [sent] = upstream_log(upstream)
    assert offered(sent, upstream_api) == ["get_weather", "lookup"]
    assert "tool_addition" not in json.dumps(sent["body"])  # folded, for every upstream


def test_a_removed_tool_is_not_offered_and_its_earlier_calls_stay(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """The model is offered the tools in effect at the end; the call of a tool withdrawn
    since stays in its context with its output (a strict chat template takes it)."""
    clear(upstream)
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
    removal = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}}
    deferred = {**CLOCK, "defer_loading": True}  # declared up front, surfaced by reference
    addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "clock"}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        {"role": "system", "content": [removal, addition]},
    ]
    message = send(claude, messages, tools=[*TOOLS, deferred])
    assert message.content
    [sent] = upstream_log(upstream)
    assert offered(sent, upstream_api) == ["clock"]
    history = json.dumps(sent["body"])
    assert "get_weather" in history  # the earlier call, as it was
    assert "sunny" in history


def test_a_change_naming_no_tool_is_refused_with_anthropics_code(claude: Anthropic) -> None:
    addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "clock"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": [addition]}]
    with pytest.raises(ToolReferenceUnresolvedError) as caught:
        send(claude, messages, tools=TOOLS)
    assert caught.value.status_code == 400
    assert caught.value.error_code == "tool_reference_unresolved"
    assert "messages.1.content.0.tool.name" in caught.value.message
