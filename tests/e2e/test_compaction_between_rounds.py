"""``context_management`` compaction crossed within the gateway's tool loop, end to end: a
request under its threshold whose MCP tool answers past it compacts before the next round,
its ``compaction`` item after the call, then the answer from the summary; streamed or not,
stored or not, and continued from. The real gateway, a real MCP server (the ``mcp`` SDK),
the fake upstream, the official ``openai`` SDK."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from openai import OpenAI

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.fake_upstream.plan import SUMMARY_HEADING
from stateway.launch import start_gateway
from tests.support.mcp_server import serve_mcp

LOCAL: Any = {"type": "mcp", "server_label": "local", "require_approval": "never"}
ECHO = '[[tool:local__echo:{"text":"0123456789","times":1000}]]'
"""A round calling the MCP ``echo`` tool, which answers 10,000 characters: some 2,500
estimated tokens, past :data:`THRESHOLD`, where the request itself is far under it."""
THRESHOLD = 1000
COMPACTION: Any = [{"type": "compaction", "compact_threshold": THRESHOLD}]
TYPES = ["mcp_list_tools", "mcp_call", "compaction", "message"]


@dataclass
class Setup:
    sdk: OpenAI
    upstream: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("between_rounds")
    with serve_mcp() as server, start_fake_upstream() as upstream:
        config = directory / "stateway.toml"
        config.write_text(
            f'[[backends]]\nname = "local"\nurl = "{upstream}"\n'
            f'[mcp_servers.local]\nurl = "{server.url}"\n'
        )
        args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
        env = {"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1"}
        with (
            start_gateway(args, env=env) as url,
            OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk,
        ):
            yield Setup(sdk, upstream)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def create(sdk: OpenAI, **fields: Any) -> Any:
    return sdk.responses.create(
        model="m",
        input=ECHO,
        tools=[LOCAL],
        extra_body={"context_management": COMPACTION},
        **fields,
    )


def assert_answered_from_the_summary(output: list[Any]) -> None:
    assert [item.type for item in output] == TYPES
    call, compaction, message = output[1:]
    assert call.output == "0123456789" * 1000  # the tool ran, its result kept in the output
    assert compaction.encrypted_content.startswith("sw1.")
    text = message.content[0].text
    assert text.startswith(f"Hello! You said: {SUMMARY_PREFIX}{SUMMARY_HEADING}")
    assert "Tool said" not in text  # the call's output reached it only summarized


@pytest.mark.parametrize("store", [True, False])
def test_a_tool_output_past_the_threshold_compacts_before_the_next_round(
    setup: Setup, store: bool
) -> None:
    response = create(setup.sdk, store=store)
    assert response.status == "completed", response.error
    assert_answered_from_the_summary(response.output)
    if store:
        stored = setup.sdk.responses.retrieve(response.id)
        assert [item.type for item in stored.output] == TYPES
        following = setup.sdk.responses.create(
            model="m", input="[[echo]]", previous_response_id=response.id
        )
    else:
        sent = [item.model_dump(exclude_none=True, warnings=False) for item in response.output]
        following = setup.sdk.responses.create(
            model="m", input=[user(ECHO), *sent, user("[[echo]]")], store=False
        )
    transcript = following.output_text
    # the next turn goes on from the compaction: the user's message, the summary (the
    # call before it only there), the answer after it, the new message
    assert transcript.startswith(f"user: {ECHO}\nuser: {SUMMARY_PREFIX}{SUMMARY_HEADING}\n")
    assert f"\nassistant: Hello! You said: {SUMMARY_PREFIX}" in transcript
    assert transcript.endswith("\nuser: [[echo]]")


@pytest.mark.parametrize("store", [True, False])
def test_a_stream_announces_the_compaction_after_the_call_and_before_the_answer(
    setup: Setup, store: bool
) -> None:
    events = list(create(setup.sdk, store=store, stream=True))
    items = [
        (event.type, event.item.type, event.output_index)
        for event in events
        if event.type in ("response.output_item.added", "response.output_item.done")
    ]
    assert items == [
        ("response.output_item.added", "mcp_list_tools", 0),
        ("response.output_item.done", "mcp_list_tools", 0),
        ("response.output_item.added", "mcp_call", 1),
        ("response.output_item.done", "mcp_call", 1),
        ("response.output_item.added", "compaction", 2),
        ("response.output_item.done", "compaction", 2),
        ("response.output_item.added", "message", 3),
        ("response.output_item.done", "message", 3),
    ]
    [added] = [
        at
        for at, event in enumerate(events)
        if event.type == "response.output_item.added" and event.item.type == "compaction"
    ]
    assert events[added + 1].type == "response.compaction.compacting"
    compaction = events[added].item  # announced whole, its seal in it, as done gives it
    assert compaction == events[added + 2].item
    final = events[-1]
    assert final.type == "response.completed"
    assert_answered_from_the_summary(final.response.output)
    assert final.response.output[2] == compaction


def test_a_conversation_turn_appends_its_compaction_where_it_was_made(setup: Setup) -> None:
    conversation = setup.sdk.conversations.create()
    response = create(setup.sdk, conversation=conversation.id)
    assert_answered_from_the_summary(response.output)
    items = setup.sdk.conversations.items.list(conversation.id, order="asc").data
    assert [item.type for item in items] == ["message", *TYPES]
    following = setup.sdk.responses.create(
        model="m", input="[[echo]]", conversation=conversation.id
    )
    transcript = following.output_text
    assert transcript.startswith(f"user: {ECHO}\nuser: {SUMMARY_PREFIX}{SUMMARY_HEADING}\n")
