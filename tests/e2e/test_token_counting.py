"""``/v1/responses/input_tokens`` in front of model servers that tokenize like llama.cpp,
or not at all (then the count is the gateway's estimate, and says so), LM Studio's among
them, which answers the routes it does not serve with a 200 that is only an error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.support.fake_search import FakeSearch
from tests.support.mcp_server import RunningMcpServer, serve_mcp

MODEL = "fake-model"
LOCAL: Any = {"type": "mcp", "server_label": "local", "require_approval": "never"}


@pytest.fixture(
    scope="module",
    params=[
        "llama.cpp-chat",
        "llama.cpp-responses",
        "none-chat",
        "none-responses",
        "lmstudio-responses",
    ],
)
def counted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, OpenAI]]:
    tokenizer, api = request.param.split("-")
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    with (
        start_fake_upstream(tokenizer=tokenizer) as upstream,
        start_gateway(
            ["--upstream", upstream, "--upstream-api", api, "--database", database]
        ) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        yield tokenizer, client


def test_count_by_the_servers_tokenizer_or_the_estimate(counted: tuple[str, OpenAI]) -> None:
    tokenizer, client = counted
    raw = client.responses.input_tokens.with_raw_response.count(
        model=MODEL, input="one two three", instructions="be kind"
    )
    if tokenizer == "llama.cpp":  # "<|system|>be", "kind", "<|user|>one", "two", "three"
        assert raw.headers["stateway-token-count"] == "upstream"
        assert raw.parse().input_tokens == 5
    else:  # about four bytes of the request's JSON a token
        assert raw.headers["stateway-token-count"] == "estimate"
        assert 20 < raw.parse().input_tokens < 60


@pytest.fixture(scope="module")
def with_tools(
    tmp_path_factory: pytest.TempPathFactory, searching: FakeSearch
) -> Iterator[tuple[OpenAI, RunningMcpServer]]:
    """A gateway with a search provider and an MCP server, in front of a model server
    without a tokenizer: its counts are estimates, which weigh every tool offered."""
    directory = tmp_path_factory.mktemp("counted-tools")
    with serve_mcp() as server, start_fake_upstream(tokenizer="none") as upstream:
        config = directory / "stateway.toml"
        config.write_text(f'[mcp_servers.local]\nurl = "{server.url}"\n')
        args = ["--config", str(config), "--upstream", upstream]
        args += ["--database", f"sqlite:///{directory / 'stateway.db'}"]
        with (
            start_gateway(args, env=searching.gateway_env("searxng")) as url,
            OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
        ):
            yield client, server


def test_the_gateways_tools_are_counted_as_a_run_offers_them(
    with_tools: tuple[OpenAI, RunningMcpServer],
) -> None:
    """The web search's function is counted, and the MCP tools a continuation would be
    offered from its chain's listing; a count never lists a server, so a first turn's
    server adds nothing."""
    client, server = with_tools
    count = client.responses.input_tokens.count
    alone = count(model=MODEL, input="again").input_tokens
    assert count(model=MODEL, input="again", tools=[{"type": "web_search"}]).input_tokens > alone
    first = client.responses.create(model=MODEL, input="hello", tools=[LOCAL])
    listings = server.stats.listings
    after = count(model=MODEL, input="again", previous_response_id=first.id).input_tokens
    offered = count(model=MODEL, input="again", previous_response_id=first.id, tools=[LOCAL])
    assert offered.input_tokens > after + 50  # the schemas of the server's tools
    assert count(model=MODEL, input="again", tools=[LOCAL]).input_tokens == alone
    assert server.stats.listings == listings
