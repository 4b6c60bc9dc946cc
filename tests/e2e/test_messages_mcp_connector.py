"""Anthropic's MCP connector on the Messages frontend, end to end: ``mcp_servers`` naming a
real MCP server (built with the ``mcp`` SDK) that the real gateway calls for a model that
has no MCP client of its own; the answer shows each call as ``mcp_tool_use`` and
``mcp_tool_result`` blocks, as Anthropic's does. Driven by the ``anthropic`` SDK's beta
client, over a Chat Completions and an Anthropic upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic, AsyncAnthropic
from anthropic.types.beta import BetaMessage

from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import clear, upstream_log
from tests.e2e.test_messages_tool_search import offered
from tests.support.mcp_server import RunningMcpServer, serve_mcp

BETAS = ["mcp-client-2025-04-04"]


@dataclass
class Setup:
    claude: Anthropic
    server: RunningMcpServer


@pytest.fixture(scope="module", params=["chat", "anthropic"])
def setup(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", request.param, "--database", database]
    with (
        serve_mcp() as server,
        start_gateway(args, env={"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1"}) as url,
        Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
    ):
        yield Setup(claude, server)


def servers(setup: Setup, **extra: Any) -> list[Any]:
    return [{"type": "url", "url": setup.server.url, "name": "calc", **extra}]


def create(setup: Setup, messages: list[Any], **server: Any) -> BetaMessage:
    """``beta.messages.create`` with the ``calc`` server (``server``: more of its fields)."""
    return setup.claude.beta.messages.create(
        model="m",
        max_tokens=1024,
        messages=messages,
        mcp_servers=servers(setup, **server),
        betas=BETAS,
    )


def add(a: int, b: int) -> str:
    return f"[[tool:calc__add:{json.dumps({'a': a, 'b': b}, separators=(',', ':'))}]]"


def test_a_call_is_run_by_the_gateway_and_shown_as_anthropic_shows_it(setup: Setup) -> None:
    message = create(setup, [{"role": "user", "content": add(2, 3)}])
    use, result, text = message.content
    assert use.type == "mcp_tool_use"
    assert (use.name, use.server_name, use.input) == ("add", "calc", {"a": 2, "b": 3})
    assert use.id.startswith("mcptoolu_")
    assert result.type == "mcp_tool_result"
    assert result.tool_use_id == use.id
    assert result.is_error is False
    assert [block.text for block in result.content] == ["5"]  # type: ignore[union-attr]
    assert text.type == "text"
    assert text.text == "Tool said: 5"
    assert message.stop_reason == "end_turn"


def test_a_streamed_call_gives_the_same_blocks(setup: Setup) -> None:
    with setup.claude.beta.messages.stream(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": add(4, 5)}],
        mcp_servers=servers(setup),
        betas=BETAS,
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert [block.type for block in message.content] == [
        "mcp_tool_use",
        "mcp_tool_result",
        "text",
    ]
    assert message.content[0].input == {"a": 4, "b": 5}  # type: ignore[union-attr]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["mcp_tool_use", "mcp_tool_result", "text"]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_leaves_during_a_call_stops_it_on_the_server(
    setup: Setup, stream: bool
) -> None:
    """The client leaving while the gateway runs a connector's call ends the call on the
    MCP server too, not only in the gateway."""
    stats = setup.server.stats
    claude = AsyncAnthropic(base_url=str(setup.claude.base_url), api_key="k", max_retries=0)
    slowly = '[[tool:calc__read_slowly:{"seconds":60}]]'
    asking = asyncio.create_task(
        claude.beta.messages.create(
            model="m",
            max_tokens=1024,
            messages=[{"role": "user", "content": slowly}],
            mcp_servers=servers(setup),
            betas=BETAS,
            stream=stream,
        )
    )
    assert await asyncio.to_thread(stats.wait_for, lambda s: s.running == 1)
    asking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asking
    assert await asyncio.to_thread(stats.wait_for, lambda s: s.running == 0, 5.0)
    await claude.close()


def test_a_failed_call_is_an_error_result_and_the_model_goes_on(setup: Setup) -> None:
    message = create(
        setup, [{"role": "user", "content": '[[tool:calc__fail:{"message":"no way"}]]'}]
    )
    _, result, text = message.content
    assert result.type == "mcp_tool_result"
    assert result.is_error is True
    assert [block.text for block in result.content] == ["no way"]  # type: ignore[union-attr]
    assert text.type == "text"


def test_a_later_turn_sends_the_call_back_and_the_model_sees_its_output(setup: Setup) -> None:
    first = create(setup, [{"role": "user", "content": add(20, 22)}])
    second = create(
        setup,
        [
            {"role": "user", "content": add(20, 22)},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "[[echo]]"},
        ],
    )
    transcript = "".join(b.text for b in second.content if b.type == "text")
    assert "42" in transcript


def test_a_toolset_enables_tools_of_its_server(setup: Setup) -> None:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "calc",
        "default_config": {"enabled": False},
        "configs": {"echo": {"enabled": True}},
    }
    message = setup.claude.beta.messages.create(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": '[[tool:calc__echo:{"text":"hi there"}]]'}],
        mcp_servers=servers(setup),
        tools=[toolset],  # type: ignore[list-item]
        betas=["mcp-client-2025-11-20"],
    )
    use, result, _ = message.content
    assert use.type == "mcp_tool_use"
    assert use.name == "echo"
    assert result.type == "mcp_tool_result"
    assert [block.text for block in result.content] == ["hi there"]  # type: ignore[union-attr]


def test_a_server_off_the_allow_list_is_a_400_naming_the_field_as_sent(setup: Setup) -> None:
    """The refusal names ``mcp_servers``, as every Messages 400 starts with its field,
    not the Responses API's ``server_url``, which this client never sent."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        setup.claude.beta.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            mcp_servers=[{"type": "url", "url": "http://10.1.2.3/mcp", "name": "x"}],
            betas=BETAS,
        )
    message = caught.value.response.json()["error"]["message"]
    assert message.startswith("mcp_servers: ")
    assert "'http://10.1.2.3/mcp' is not allowed" in message
    assert "server_url" not in message


def test_the_authorization_token_reaches_the_server_as_a_bearer_token(setup: Setup) -> None:
    message = create(
        setup,
        [{"role": "user", "content": "[[tool:calc__whoami:{}]]"}],
        authorization_token="tok-1",
    )
    _, result, _ = message.content
    assert result.type == "mcp_tool_result"
    assert [block.text for block in result.content] == ["Bearer tok-1"]  # type: ignore[union-attr]


def test_a_url_carrying_credentials_is_a_400_without_quoting_them(setup: Setup) -> None:
    """A URL's ``user:password@`` would be stored with a thread's tools (and sent as HTTP
    Basic): the connector's credential is its ``authorization_token``, which is never
    kept. The 400 names the field and not what it held."""
    host = setup.server.url.split("//", 1)[1]
    with pytest.raises(anthropic.BadRequestError) as caught:
        setup.claude.beta.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "[[tool:calc__whoami:{}]]"}],
            mcp_servers=[
                {"type": "url", "url": f"http://alice:pa55-w0rd-hush@{host}", "name": "calc"}
            ],
            betas=BETAS,
        )
    error = caught.value.response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("mcp_servers.0.url: the URL must not carry credentials")
    assert "authorization_token" in error["message"]
    assert "pa55-w0rd-hush" not in caught.value.response.text


def test_a_deferred_toolsets_tools_wait_for_the_tool_search_to_load_them(
    setup: Setup, fake_upstream: str
) -> None:
    """``default_config.defer_loading`` beside the tool search server tool, as Anthropic's
    tool search guide pairs them: the model is offered only the search, which names the
    server; the search loads the tool it finds, referenced by its own name, and a later
    turn sending the blocks back is offered it again."""
    toolset = {"type": "mcp_toolset", "mcp_server_name": "calc"}
    toolset["default_config"] = {"defer_loading": True}
    regex = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    prompt = '[[tool:tool_search:{"query":"add"}]] [[then:calc__add:{"a":2,"b":3}]]'

    def turn(messages: list[Any]) -> BetaMessage:
        return setup.claude.beta.messages.create(
            model="m",
            max_tokens=1024,
            messages=messages,
            mcp_servers=servers(setup),
            tools=[toolset, regex],  # type: ignore[list-item]
            betas=["mcp-client-2025-11-20"],
        )

    clear(fake_upstream)
    first = turn([{"role": "user", "content": prompt}])
    use, found, call, result, _ = first.content
    assert (use.type, found.type) == ("server_tool_use", "tool_search_tool_result")
    assert [r.tool_name for r in found.content.tool_references] == ["add"]  # type: ignore[union-attr]
    assert (call.type, call.name, call.server_name) == ("mcp_tool_use", "add", "calc")  # type: ignore[union-attr]
    assert [block.text for block in result.content] == ["5"]  # type: ignore[union-attr]
    searched, called, answered = (entry["body"] for entry in upstream_log(fake_upstream))
    assert offered(searched) == ["tool_search"]
    described = searched["tools"][0].get("description") or searched["tools"][0]["function"]
    assert "- calc (the tools of an MCP server)" in str(described)
    assert offered(called) == offered(answered) == ["tool_search", "calc__add"]

    clear(fake_upstream)
    history = [b.model_dump(exclude_none=True) for b in first.content]
    turn(
        [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": history},
            {"role": "user", "content": "[[echo]]"},
        ]
    )
    [again] = (entry["body"] for entry in upstream_log(fake_upstream))
    assert offered(again) == ["tool_search", "calc__add"]
