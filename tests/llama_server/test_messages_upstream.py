"""llama-server's own ``/v1/messages`` as the gateway's upstream (``api = "anthropic"``):
the tool choices.

llama-server serves Messages by converting the body to Chat Completions, and keeps only
the kind of a ``tool_choice``: ``tool`` becomes ``required`` over every tool offered, so
the tool it names is not forced, and ``none`` is dropped, leaving ``auto``, so a call the
model writes is a call. The gateway sends a named choice as ``any`` with only that tool
offered, and ``none`` with no tools. Of two tools, the tiny model forced to call one
writes ``get_weather``: naming ``get_time`` shows the choice forced. It calls nothing
unforced, so an assistant message begun as a call (:data:`BEGUN_CALL`, a prefill the
model's answer continues) stands for a model writing a call where ``none`` forbids one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic import Anthropic
from anthropic.types import Message

from tests.e2e.configured import RunningGateway
from tests.llama_server.server import MODEL
from tests.llama_server.test_tools import ARGUMENTS, TIME, WEATHER

pytestmark = pytest.mark.llama_server

TOOLS: Any = [{"name": t["name"], "input_schema": t["parameters"]} for t in (WEATHER, TIME)]
BEGUN_CALL = '<tool_call>{"name": "get_time", "arguments": {"city": "'
"""The start of a call in the tiny model's chat template's syntax."""


@pytest.fixture
def claude(messages_gateway: RunningGateway) -> Iterator[Anthropic]:
    with Anthropic(base_url=messages_gateway.url, api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def _create(claude: Anthropic, stream: bool, **request: Any) -> Message:
    if not stream:
        return claude.messages.create(model=MODEL, max_tokens=200, tools=TOOLS, **request)
    with claude.messages.stream(model=MODEL, max_tokens=200, tools=TOOLS, **request) as events:
        return events.get_final_message()


def _uses(message: Message) -> list[tuple[str, object]]:
    return [(block.name, block.input) for block in message.content if block.type == "tool_use"]


def _asked_in_a_call(claude: Anthropic, choice: Any) -> Message:
    """The answer to an assistant message begun as a call, with ``choice``."""
    messages: Any = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": BEGUN_CALL},
    ]
    return _create(claude, False, messages=messages, tool_choice=choice)


def test_the_server_forces_no_named_tool_and_reads_none_as_auto(llama: str) -> None:
    """Asked directly, llama-server answers a named choice as ``any`` and ``none`` as
    ``auto``: why the gateway sends neither as it came. Should a newer build honour
    them, this fails, and the rewrite may go."""
    with Anthropic(base_url=llama, api_key="unused", max_retries=0) as server:
        named = _create(
            server,
            False,
            messages=[{"role": "user", "content": "Time?"}],
            tool_choice={"type": "tool", "name": "get_time"},
        )
        unforbidden = _asked_in_a_call(server, {"type": "none"})
    assert _uses(named) == [("get_weather", ARGUMENTS)]
    assert [name for name, _ in _uses(unforbidden)] == ["get_time"]
    assert unforbidden.stop_reason == "tool_use"


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_is_the_one_used(claude: Anthropic, stream: bool) -> None:
    message = _create(
        claude,
        stream,
        messages=[{"role": "user", "content": "Time?"}],
        tool_choice={"type": "tool", "name": "get_time"},
    )
    assert _uses(message) == [("get_time", ARGUMENTS)]
    assert message.stop_reason == "tool_use"


def test_any_forces_a_tool(claude: Anthropic) -> None:
    message = _create(
        claude,
        False,
        messages=[{"role": "user", "content": "Weather?"}],
        tool_choice={"type": "any"},
    )
    assert _uses(message) == [("get_weather", ARGUMENTS)]


def test_none_calls_no_tool(claude: Anthropic) -> None:
    message = _asked_in_a_call(claude, {"type": "none"})
    assert _uses(message) == []
    assert message.stop_reason != "tool_use"
    text = "".join(block.text for block in message.content if block.type == "text")
    assert text.startswith("<tool_call>")  # the call the model wrote, as text
