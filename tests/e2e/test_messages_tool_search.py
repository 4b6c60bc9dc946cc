"""Anthropic's tool search server tool end to end: the real gateway in front of the fake
model (each upstream shape), driven by the official ``anthropic`` SDK. The gateway holds
the deferred tools back and runs the search itself; the answer shows it as Anthropic's
does (``server_tool_use``, ``tool_search_tool_result``), and the blocks sent back load
what they reference."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest
from anthropic import Anthropic

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import SEND, clear, create, upstream_log

MODEL = "fake-model"
REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
SHELL: dict[str, Any] = {
    "name": "run_shell",
    "description": "Run a command.",
    "input_schema": {"type": "object"},
}
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "defer_loading": True,
}
ORDERS: dict[str, Any] = {
    "name": "list_orders",
    "description": "A customer's orders.",
    "input_schema": {"type": "object"},
    "defer_loading": True,
}
PROMPT = '[[tool:tool_search:{"query":"weather"}]] [[then:get_weather:{"city":"Oslo"}]] go'


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
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
    with (
        start_gateway(args) as url,
        Anthropic(base_url=url, api_key="client-key", max_retries=0) as sdk,
    ):
        yield sdk


def offered(body: dict[str, Any]) -> list[str]:
    """The names of the tools an upstream request offers, whatever its shape."""
    return [tool.get("name") or tool["function"]["name"] for tool in body.get("tools") or ()]


def sent_back(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [block.model_dump(exclude_none=True) for block in message.content]


@pytest.mark.parametrize("send", SEND)
def test_the_gateway_searches_and_the_model_calls_the_tool_found(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    clear(upstream)
    tools = [REGEX, SHELL, WEATHER, ORDERS]
    message = send(claude, [{"role": "user", "content": PROMPT}], tools=tools)
    use, result, call = message.content
    assert use.type == "server_tool_use"
    assert use.id.startswith("srvtoolu_")
    assert (use.name, use.input) == ("tool_search_tool_regex", {"query": "weather"})
    assert result.type == "tool_search_tool_result"
    assert result.tool_use_id == use.id
    assert result.content.type == "tool_search_tool_search_result"
    assert [ref.tool_name for ref in result.content.tool_references] == ["get_weather"]
    assert call.type == "tool_use"
    assert (call.name, call.input) == ("get_weather", {"city": "Oslo"})
    assert message.stop_reason == "tool_use"
    first, second = (entry["body"] for entry in upstream_log(upstream))
    assert offered(first) == ["run_shell", "tool_search"]  # the deferred tools held back
    assert offered(second) == ["run_shell", "get_weather", "tool_search"]


@pytest.mark.parametrize("send", SEND)
def test_a_later_turn_loads_what_its_history_references(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    tools = [REGEX, SHELL, WEATHER, ORDERS]
    first = create(claude, [{"role": "user", "content": PROMPT}], tools=tools)
    call = first.content[-1]
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": sent_back(first)},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    clear(upstream)
    answer = send(claude, history, tools=tools)
    assert answer.stop_reason == "end_turn"
    assert [block.type for block in answer.content] == ["text"]
    assert answer.content[0].text == "Tool said: sunny"
    [sent] = upstream_log(upstream)
    assert offered(sent["body"]) == ["run_shell", "get_weather", "tool_search"]


@pytest.mark.parametrize("send", SEND)
def test_a_bad_pattern_is_an_error_in_the_result_and_the_model_goes_on(
    claude: Anthropic, send: Any
) -> None:
    prompt = '[[tool:tool_search:{"query":"(weather"}]] go'
    message = send(claude, [{"role": "user", "content": prompt}], tools=[REGEX, SHELL, WEATHER])
    use, result, text = message.content
    assert result.type == "tool_search_tool_result"
    assert result.tool_use_id == use.id
    assert result.content.type == "tool_search_tool_result_error"
    assert result.content.error_code == "invalid_tool_input"
    assert "not a valid regular expression" in (result.content.error_message or "")
    assert text.type == "text"
    assert text.text.startswith(
        "Tool said: The tool search did not complete: invalid_tool_input: The pattern"
    )
    assert message.stop_reason == "end_turn"
    again = create(
        claude,
        [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": sent_back(message)},
            {"role": "user", "content": "and now?"},
        ],
        tools=[REGEX, SHELL, WEATHER],
    )
    assert again.content[-1].text == "Hello! You said: and now?"


def test_the_bm25_variant_ranks_by_words(claude: Anthropic, upstream: str) -> None:
    prompt = '[[tool:tool_search:{"query":"what is the weather in a city"}]] go'
    message = create(
        claude, [{"role": "user", "content": prompt}], tools=[BM25, SHELL, ORDERS, WEATHER]
    )
    use, result, _ = message.content
    assert use.name == "tool_search_tool_bm25"
    found = [ref.tool_name for ref in result.content.tool_references]
    assert found == ["get_weather", "list_orders"]  # "a" is in its description too


def test_a_reference_to_no_declared_tool_is_a_400(claude: Anthropic) -> None:
    use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex"}
    found = {
        "type": "tool_search_tool_search_result",
        "tool_references": [{"type": "tool_reference", "tool_name": "get_time"}],
    }
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {**use, "input": {"query": "time"}},
                {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": found},
                {"type": "text", "text": "none"},
            ],
        },
        {"role": "user", "content": "hi"},
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(claude, history, tools=[REGEX, SHELL, WEATHER])
    error = orjson.loads(caught.value.response.content)["error"]
    assert error["message"].startswith(
        "messages.1.content.1.content.tool_references.0.tool_name: Tool reference 'get_time'"
    )


def test_a_reference_to_a_tool_removed_since_loads_nothing(
    claude: Anthropic, upstream: str
) -> None:
    """The tool was defined where the search found it: no 400; the later removal wins,
    and the tool is not offered again."""
    first = create(claude, [{"role": "user", "content": PROMPT}], tools=[REGEX, SHELL, WEATHER])
    call = first.content[-1]
    removal = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}}
    history = [
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": sent_back(first)},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
        {"role": "assistant", "content": "It is sunny."},
        {"role": "system", "content": [removal]},
        {"role": "user", "content": "and now?"},
    ]
    clear(upstream)
    answer = create(claude, history, tools=[REGEX, SHELL, WEATHER])
    assert answer.stop_reason == "end_turn"
    [sent] = upstream_log(upstream)
    assert offered(sent["body"]) == ["run_shell", "tool_search"]


@pytest.mark.parametrize("searching", [True, False])
def test_a_tool_results_references_load_the_deferred_tools_they_name(
    claude: Anthropic, upstream: str, searching: bool
) -> None:
    """A client's own search (Claude Code's ToolSearch) answers with ``tool_reference``
    blocks in its ``tool_result``: beside the server tool, which holds deferred tools
    back, they load what they name (a name no tool has loads nothing); without it every
    tool is offered anyway."""
    finder = {"name": "find_tools", "input_schema": {"type": "object"}}
    call = {"type": "tool_use", "id": "toolu_1", "name": "find_tools", "input": {"q": "w"}}
    references = [
        {"type": "tool_reference", "tool_name": "get_weather"},
        {"type": "tool_reference", "tool_name": "not_declared"},
    ]
    history = [
        {"role": "user", "content": "find weather"},
        {"role": "assistant", "content": [call]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": references}],
        },
    ]
    tools = [*([REGEX] if searching else []), finder, WEATHER, ORDERS]
    clear(upstream)
    answer = create(claude, history, tools=tools)
    assert answer.content[-1].text.startswith("Tool said: ")
    [sent] = upstream_log(upstream)
    if searching:
        assert offered(sent["body"]) == ["find_tools", "get_weather", "tool_search"]
    else:
        assert offered(sent["body"]) == ["find_tools", "get_weather", "list_orders"]
