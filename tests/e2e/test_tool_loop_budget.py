"""``max_output_tokens`` across the gateway's tool loop, end to end, over a Responses
upstream that refuses a budget under 16 as hosted OpenAI does (the fake's
``min_output_tokens``; the backend's ``min_output_tokens`` says so): a later round left
less than that is not asked for it, and the response ends ``incomplete``
(``max_output_tokens``) as it does when the budget is used up, rather than failing on the
upstream's 400 after its tools ran. The real gateway, a real MCP server, the official
SDKs; a Chat upstream's exact remainder is ``test_hidden_rounds``'."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.support.mcp_server import serve_mcp

HOSTED_LEAST = 16
"""The least ``max_output_tokens`` hosted OpenAI's Responses API takes."""
LOCAL: Any = {"type": "mcp", "server_label": "local", "require_approval": "never"}
ADD = '[[tool:local__add:{"a":2,"b":3}]]'
"""A round writing one call (one token, as the fake counts), its answer the next round's
"Tool said: 5" (three)."""


@dataclass
class Setup:
    sdk: OpenAI
    claude: Anthropic
    upstream: str


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("budget")
    with (
        serve_mcp() as server,
        start_fake_upstream(min_output_tokens=HOSTED_LEAST) as upstream,
    ):
        config = directory / "stateway.toml"
        config.write_text(
            f'[[backends]]\nname = "hosted"\nurl = "{upstream}"\napi = "responses"\n'
            f"min_output_tokens = {HOSTED_LEAST}\n"
            'gateway_tools = [{type = "mcp", server_label = "local", '
            f'server_url = "{server.url}"}}]\n'
            f'[mcp_servers.local]\nurl = "{server.url}"\n'
        )
        args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
        env = {"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1", "STATEWAY_MAX_TOOL_ROUNDS": "4"}
        with (
            start_gateway(args, env=env) as url,
            OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk,
            Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
        ):
            yield Setup(sdk, claude, upstream)


def budgets_asked(upstream: str) -> list[int | None]:
    """The ``max_output_tokens`` of every request the upstream got, oldest first; the
    log forgotten."""
    root = upstream.removesuffix("/v1") + "/_fake/requests"
    with urllib.request.urlopen(root) as reply:
        logged = json.loads(reply.read())["data"]
    urllib.request.urlopen(urllib.request.Request(root, method="DELETE")).close()
    return [entry["body"].get("max_output_tokens") for entry in logged]


def test_a_round_left_less_than_the_upstream_takes_ends_the_response_incomplete(
    setup: Setup,
) -> None:
    budgets_asked(setup.upstream)
    response = setup.sdk.responses.create(
        model="m", input=ADD, tools=[LOCAL], max_output_tokens=HOSTED_LEAST
    )
    assert response.status == "incomplete", response.error
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["mcp_list_tools", "mcp_call"]
    call = response.output[1]
    assert call.type == "mcp_call"
    assert (call.output, call.error) == ("5", None)  # its tool ran, its result kept
    assert response.usage is not None
    assert response.usage.output_tokens == 1
    assert budgets_asked(setup.upstream) == [HOSTED_LEAST]  # 15 left: not asked again
    stored = setup.sdk.responses.retrieve(response.id)
    assert stored.status == "incomplete"
    assert stored.incomplete_details is not None
    assert stored.incomplete_details.reason == "max_output_tokens"


def test_a_stream_ends_in_response_incomplete(setup: Setup) -> None:
    events = list(
        setup.sdk.responses.create(
            model="m", input=ADD, tools=[LOCAL], max_output_tokens=HOSTED_LEAST, stream=True
        )
    )
    kinds = [event.type for event in events]
    assert "response.failed" not in kinds
    assert "error" not in kinds
    last = events[-1]
    assert last.type == "response.incomplete"
    final = last.response
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call"]


def test_a_round_left_what_the_upstream_takes_is_asked_for_exactly_that(setup: Setup) -> None:
    budgets_asked(setup.upstream)
    response = setup.sdk.responses.create(
        model="m", input=ADD, tools=[LOCAL], max_output_tokens=HOSTED_LEAST + 1
    )
    assert response.status == "completed", response.error
    assert response.output_text == "Tool said: 5"
    assert budgets_asked(setup.upstream) == [HOSTED_LEAST + 1, HOSTED_LEAST]


def test_each_hidden_round_of_a_messages_client_may_write_max_tokens(setup: Setup) -> None:
    """A Messages client's gateway tools run in hidden rounds of the same loop, and
    ``max_tokens`` bounds each call to the model, as Anthropic applies it to each call of a
    request with server tools: the round after the tool is asked for all of it."""
    budgets_asked(setup.upstream)
    message = setup.claude.messages.create(
        model="m", max_tokens=HOSTED_LEAST, messages=[{"role": "user", "content": ADD}]
    )
    assert message.stop_reason == "end_turn"
    assert [block.type for block in message.content] == ["text"]
    assert budgets_asked(setup.upstream) == [HOSTED_LEAST, HOSTED_LEAST]
